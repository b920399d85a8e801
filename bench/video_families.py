"""Block time and memory of the video and audio diffusion models at their templates' sizes:
LTX-2, HunyuanVideo 1.5, Kandinsky 5 Lite, Wan 2.2 S2V, Stable Audio Open, ACE-Step 1.5; one block
of each kind at full width, full depth EXTRAPOLATED.

As `bench/llm_families.py` (the model to follow): for each family this builds the family's own
network on the meta device at the released widths with 1 block (`--blocks`) of each kind (the
config classes' defaults are the released models'; key names are ComfyUI's, with the prefix
`model.diffusion_model.` and the `config` metadata LTX-2 files carry), streams random weights into
a `.safetensors` file under /tmp (bf16; `--fp8`: matrices in float8_e4m3fn), and in a fresh
process loads it through UNETLoader's loader (`load_diffusion_model`: family detection, storage
policy, per-layer cast) and runs one `apply_model` (batch 1, no CFG: one network call) on inputs
of the template's size, made through the family's own conditioning path (`extra_inputs`,
`concat_cond`) as a sampler does:

| family | template (package 0.1.123) | latent of one call |
|---|---|---|
| ltx2 (LTX-2 19B) | video_ltx2_t2v: 768x512, 97 frames, 25 fps, audio 97 frames | video 128 x 13 x 16 x 24 (4 992 tokens) + audio 8 x 97 x 16 (97 tokens) |
| hunyuan_video15 (8.3B) | video_hunyuan_video_1.5_720p_t2v: 1280x720, 121 frames | 32 x 31 x 45 x 80 (111 600 tokens) |
| kandinsky5 (Lite 2B) | video_kandinsky5_t2v: 768x512, 121 frames | 16 x 31 x 64 x 96, 2x2 patches (47 616 tokens) |
| wan22_s2v (14B) | video_wan2_2_14B_s2v: 640x640, 77 frames | 16 x 20 x 80 x 80, 2x2 patches (32 000 tokens) + 1 reference frame (1 600) + 19 motion frames (packed by the motioner; not counted in the token figures) |
| stable_audio (Open 1.0) | audio_stable_audio_example: 47.6 s | 64 x 1 024 |
| ace_step15 (1.5, 2B) | audio_ace_step_1_5_checkpoint: 120 s | 64 x 3 000, patch 2 (1 500 tokens) |

Printed per family: load time and RSS (anonymous / file-backed), the forward's wall and CPU
seconds, its peak RSS (VmHWM reset before the forward) split as llm_families.py does (anonymous ~
peak minus the file-backed RSS), the seconds of each block (forward hooks; wall) and of the rest
of the call, and the full depth EXTRAPOLATED: per-block seconds times the real block counts plus
the rest (one call; a sampling step with CFG is two), and the file's bytes per block times the
depth. `--scale S` runs the video models at S times the template's sides (frames unchanged):
then the template-size figure is EXTRAPOLATED twice, per block by the work of a block at both
token counts (linear layers ~ tokens, self-attention ~ tokens^2, by the block's widths), and
says so.

    OMP_NUM_THREADS=2 .venv/bin/python bench/video_families.py --families stable_audio ace_step15
    OMP_NUM_THREADS=2 .venv/bin/python bench/video_families.py --families ltx2 --threads 2
    OMP_NUM_THREADS=2 .venv/bin/python bench/video_families.py --families hunyuan_video15 --scale 0.25

At the template sizes on 2 CPU cores one block of the big video models takes many minutes
(HunyuanVideo 1.5 at 720p: 111 600 tokens of self-attention), hence `--scale`.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.llm_families import _mapped_ranges, _reset_peak, _status, _tensor  # noqa: E402

GIB = 1 << 30
PREFIX = "model.diffusion_model."


# --- the families: config at the released widths with `blocks` blocks, real depth, inputs ---

def _ltx2_config(blocks: int) -> Any:
    from comfy_core.families.ltx2.dit import LTXAVConfig

    return LTXAVConfig(num_layers=blocks, **LTX2_OPTIONS)


# What LTX-2's files say in their `config` metadata (names and shapes cannot show it).
LTX2_OPTIONS = {"rope_type": "split", "frequencies_precision": "float64", "use_middle_indices_grid": True,
                "causal_temporal_positioning": True, "av_ca_timestep_scale_multiplier": 1000.0}


def _hv15_config(blocks: int) -> Any:
    from comfy_core.families.hunyuan_video15.dit import HunyuanVideo15Config

    return HunyuanVideo15Config(depth=blocks)


def _kandinsky5_config(blocks: int) -> Any:
    from comfy_core.families.kandinsky5.dit import Kandinsky5Config

    return Kandinsky5Config(num_visual_blocks=blocks, num_text_blocks=min(blocks, 2))


def _s2v_config(blocks: int) -> Any:
    from comfy_core.families.wan.dit import WanConfig

    return WanConfig(model_type="s2v", num_layers=blocks)


def _stable_audio_config(blocks: int) -> Any:
    from comfy_core.families.stable_audio.dit import StableAudioDiTConfig

    return StableAudioDiTConfig(depth=blocks)


def _ace15_config(blocks: int) -> Any:
    """ACE-Step 1.5's DiT (2 048 wide, 24 layers, 16 query / 8 key-value heads of 128, MLP 6 144),
    its lyric (8 layers), timbre (4), pooler (2) and detokenizer (2) stacks at the same width, a
    1 024-wide text input (Qwen3-Embedding-0.6B), as the released config reads."""
    from comfy_core.families.ace_step15.network import AceStep15Config, Stack

    def stack(layers: int) -> Any:
        return Stack(width=2048, layers=layers, heads=16, kv_heads=8, head_dim=128, inner=6144)

    return AceStep15Config(in_channels=192, out_channels=64, patch_size=2, dit=stack(blocks), encoder_width=2048,
                           text_dim=1024, timbre_dim=64, lyric=stack(8), timbre=stack(4), pooler=stack(2),
                           detokenizer=stack(2), fsq_dim=2048, pool_window=5)


def _ltx2_inputs(model: Any, scale: float, text_tokens: int, gen: torch.Generator) -> tuple[torch.Tensor, dict]:
    from comfy_core.families.ltx2.latent import pack_latents

    video = torch.randn(1, 128, 13, _side(16, scale), _side(24, scale), generator=gen)
    audio = torch.randn(1, 8, 97, 16, generator=gen)  # LTXVEmptyLatentAudio: 97 frames at 25 fps, 25 latents/s
    packed, shapes = pack_latents([video, audio])
    context = torch.randn(1, text_tokens, 2 * 3840, generator=gen)  # Gemma 3 12B's states for both streams
    return packed, dict(cross_attn=context, latent_shapes=shapes, frame_rate=25)


def _video_inputs(channels: int, frames: int, h: int, w: int, text: int, pooled: int | None = None
                  ) -> Callable[..., tuple[torch.Tensor, dict]]:
    def make(model: Any, scale: float, text_tokens: int, gen: torch.Generator) -> tuple[torch.Tensor, dict]:
        x = torch.randn(1, channels, frames, _side(h, scale), _side(w, scale), generator=gen)
        kwargs: dict[str, Any] = {"cross_attn": torch.randn(1, text_tokens, text, generator=gen)}
        if pooled is not None:
            kwargs["y"] = torch.randn(1, pooled, generator=gen)
        return x, kwargs
    return make


def _s2v_inputs(model: Any, scale: float, text_tokens: int, gen: torch.Generator) -> tuple[torch.Tensor, dict]:
    h, w = _side(80, scale), _side(80, scale)
    x = torch.randn(1, 16, 20, h, w, generator=gen)
    return x, {"cross_attn": torch.randn(1, text_tokens, 4096, generator=gen),
               # wav2vec2-large: 25 hidden states of 1 024 per audio frame, 4 per latent frame
               "audio_embed": torch.randn(1, 25, 1024, 80, generator=gen),
               "reference_latents": [torch.randn(1, 16, 1, h, w, generator=gen)],
               "reference_motion": torch.randn(1, 16, 19, h, w, generator=gen)}


def _stable_audio_inputs(model: Any, scale: float, text_tokens: int, gen: torch.Generator) -> tuple[torch.Tensor, dict]:
    x = torch.randn(1, 64, 1024, generator=gen)  # EmptyLatentAudio(47.6 s)
    return x, {"cross_attn": torch.randn(1, text_tokens, 768, generator=gen), "seconds_total": 47}


def _ace15_inputs(model: Any, scale: float, text_tokens: int, gen: torch.Generator) -> tuple[torch.Tensor, dict]:
    x = torch.randn(1, 64, 3000, generator=gen)  # EmptyAceStep1.5LatentAudio(120 s)
    return x, {"cross_attn": torch.randn(1, text_tokens, 1024, generator=gen),
               "conditioning_lyrics": torch.randn(1, 512, 1024, generator=gen)}


def _side(n: int, scale: float) -> int:
    """A latent side at `scale` (even, for 2x2 patches); the template's own side at 1."""
    return n if scale == 1.0 else max(2, 2 * round(n * scale / 2))


FAMILIES: dict[str, dict[str, Any]] = {
    "ltx2": dict(registry="ltxav", config=_ltx2_config, depth={"transformer_blocks": 48}, params="19 B", width=4096,
                 inputs=_ltx2_inputs, tokens=lambda s: 13 * _side(16, s) * _side(24, s),
                 metadata={"config": json.dumps({"transformer": LTX2_OPTIONS})}),
    "hunyuan_video15": dict(registry="hunyuan_video15", config=_hv15_config, depth={"double_blocks": 54},
                            params="8.3 B", width=2048, inputs=_video_inputs(32, 31, 45, 80, 3584),
                            tokens=lambda s: 31 * _side(45, s) * _side(80, s)),
    "kandinsky5": dict(registry="kandinsky5", config=_kandinsky5_config,
                       depth={"visual_transformer_blocks": 32, "text_transformer_blocks": 2}, params="2 B",
                       width=1792, video_groups=("visual_transformer_blocks",),
                       inputs=_video_inputs(16, 31, 64, 96, 3584, pooled=768),
                       tokens=lambda s: 31 * _side(64, s) * _side(96, s) // 4),
    "wan22_s2v": dict(registry="wan22_s2v", config=_s2v_config, depth={"blocks": 40}, params="16 B", width=5120,
                      inputs=_s2v_inputs, tokens=lambda s: 21 * _side(80, s) * _side(80, s) // 4),
    "stable_audio": dict(registry="stable_audio", config=_stable_audio_config, depth={"transformer.layers": 24},
                         params="1.1 B", prefix="model.model.", loader="checkpoint", width=1536,
                         inputs=_stable_audio_inputs, tokens=lambda s: 1024),
    "ace_step15": dict(registry="ace_step15", config=_ace15_config, depth={"decoder.layers": 24}, params="2 B",
                       width=2048,
                       inputs=_ace15_inputs, tokens=lambda s: 1500),
}


def _network(family: str, blocks: int) -> torch.nn.Module:
    from comfy_core.families import default_registry

    spec = FAMILIES[family]
    with torch.device("meta"):
        return default_registry().get(spec["registry"]).architecture.build(spec["config"](blocks))


def shapes_of(family: str, blocks: int) -> dict[str, tuple[int, ...]]:
    """The file's tensors: the network under `model.diffusion_model.`; Stable Audio's is a
    checkpoint (CheckpointLoaderSimple, as its template): the network under `model.model.`, its
    Oobleck VAE (released widths) and the two seconds embedders (768 wide, 256 features)."""
    prefix = FAMILIES[family].get("prefix", PREFIX)
    shapes = {prefix + name: tuple(t.shape) for name, t in _network(family, blocks).state_dict().items()}
    if family == "stable_audio":
        from comfy_core.families.stable_audio import VAE_PREFIX
        from comfy_core.families.stable_audio.conditioner import START, TOTAL
        from comfy_core.models.oobleck_vae import OobleckConfig, OobleckVAE

        with torch.device("meta"):
            vae = OobleckVAE(OobleckConfig())
        shapes.update({VAE_PREFIX + name: tuple(t.shape) for name, t in vae.state_dict().items()})
        for stem in (START, TOTAL):
            shapes.update({f"{stem}embedder.embedding.0.weights": (128,),
                           f"{stem}embedder.embedding.1.weight": (768, 257),
                           f"{stem}embedder.embedding.1.bias": (768,)})
    return shapes


def write_file(path: Path, shapes: dict[str, tuple[int, ...]], fp8: bool, metadata: dict[str, str] | None,
               seed: int = 0) -> int:
    """Stream a safetensors file: 2-D weights in fp8 when `fp8` (ComfyUI's `*_fp8_e4m3fn` files),
    everything else bf16 (integer buffers as int64). Returns its size."""
    entries = []
    for name, shape in shapes.items():
        dtype = "F8_E4M3" if fp8 and len(shape) == 2 and name.endswith(".weight") else "BF16"
        entries.append((name, dtype, shape))
    sizes = {"F8_E4M3": 1, "BF16": 2}
    header: dict[str, Any] = {}
    offset = 0
    for name, dtype, shape in entries:
        end = offset + math.prod(shape) * sizes[dtype]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, end]}
        offset = end
    header["__metadata__"] = {"format": "pt", **(metadata or {})}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    gen = torch.Generator().manual_seed(seed)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for name, dtype, shape in entries:
            value = _tensor(name, shape, gen) if shape else torch.tensor(1.0)
            value = value.to(torch.float8_e4m3fn if dtype == "F8_E4M3" else torch.bfloat16).reshape(-1)
            f.write(value.contiguous().view(torch.uint8).numpy().tobytes() if value.numel() else b"")
    return path.stat().st_size


def _blocks(module: torch.nn.Module, dotted: str) -> torch.nn.ModuleList:
    for part in dotted.split("."):
        module = getattr(module, part)
    return module  # type: ignore[return-value]


def measure(family: str, path: Path, scale: float, text_tokens: int) -> dict:
    """In this process: load `path` as UNETLoader does, one `apply_model`; the figures."""
    from comfy_core.loading import load_checkpoint
    from comfy_core.split.diffusion_model import load_diffusion_model

    spec = FAMILIES[family]
    started = time.perf_counter()
    if spec.get("loader") == "checkpoint":
        patcher = load_checkpoint(path, output_clip=False)[0]
    else:
        patcher = load_diffusion_model(path)
    load_s = time.perf_counter() - started
    loaded = _status()
    model = patcher.model
    module = model.diffusion_model
    linears = [m for m in module.modules() if isinstance(m, torch.nn.Linear)]
    ranges = _mapped_ranges(path)
    mapped = sum(1 for m in linears if any(lo <= m.weight.data_ptr() < hi for lo, hi in ranges))
    timings: dict[str, list[float]] = {}
    cpu_timings: dict[str, list[float]] = {}
    starts: dict[int, tuple[float, float]] = {}

    def after(m: torch.nn.Module, name: str) -> None:
        wall, cpu = starts[id(m)]
        timings.setdefault(name, []).append(time.perf_counter() - wall)
        cpu_timings.setdefault(name, []).append(time.process_time() - cpu)

    for list_name in spec["depth"]:
        for block in _blocks(module, list_name):
            block.register_forward_pre_hook(
                lambda m, *_: starts.__setitem__(id(m), (time.perf_counter(), time.process_time())))
            block.register_forward_hook(lambda m, *_, n=list_name: after(m, n))
    gen = torch.Generator().manual_seed(1)
    x, options = spec["inputs"](model, scale, text_tokens, gen)
    cross = options.pop("cross_attn")
    y = options.pop("y", None)
    _reset_peak()
    before = _status()
    cpu, started = time.process_time(), time.perf_counter()
    sigma = torch.tensor([0.8])
    with patcher.applied(), torch.no_grad():
        extra = model.extra_inputs(noise=x, device=x.device, cross_attn=cross, **options)
        kwargs = {"c_crossattn": extra.pop("c_crossattn", cross), **extra}
        concat = model.concat_cond(noise=x, device=x.device)
        if concat is not None:
            kwargs["c_concat"] = concat
        if y is not None:
            kwargs["y"] = y
        conditioning_s = time.perf_counter() - started
        out = model.apply_model(x, sigma, **kwargs)
    forward_s, forward_cpu = time.perf_counter() - started, time.process_time() - cpu
    end = _status()
    return {"family": model.family.name, "file_bytes": path.stat().st_size,
            "weight_dtypes": sorted({str(m.weight.dtype) for m in linears}),
            "compute_dtype": str(getattr(model, "manual_cast_dtype", None)),
            "linears": len(linears), "linears_in_file_mapping": mapped, "load_s": load_s,
            "conditioning_s": conditioning_s, "forward_s": forward_s, "forward_cpu_s": forward_cpu,
            "shape": list(x.shape), "finite": bool(torch.isfinite(out).all()), "after_load": loaded,
            "before_forward": before, "end": end, "block_s": timings, "block_cpu_s": cpu_timings,
            "threads": torch.get_num_threads()}


def _block_work(shapes: dict[str, tuple[int, ...]], prefix: str, group: str, tokens: int, width: int) -> float:
    """Multiply-adds of one block of `group` on `tokens` tokens: its matrices once per token,
    plus self-attention over the tokens (tokens^2 x the attention width, for scores and values).
    Cross-attention to the text and the audio stream (a few hundred tokens) are left out."""
    stem = f"{prefix}{group}.0."
    mats = [s for n, s in shapes.items() if n.startswith(stem) and len(s) == 2]
    return tokens * sum(s[0] * s[1] for s in mats) + 2 * tokens * tokens * width


def report(family: str, r: dict, shapes: dict[str, tuple[int, ...]], scale: float, blocks: int) -> None:
    spec = FAMILIES[family]
    a, e = r["after_load"], r["end"]
    peak_anon = e["VmHWM"] - e["RssFile"]
    print(f"  {r['family']}: linear weights {r['weight_dtypes']} ({r['linears_in_file_mapping']}/{r['linears']} "
          f"views of the file mapping), compute {r['compute_dtype']}, file {_gib(r['file_bytes'])}, "
          f"{r['threads']} threads")
    print(f"    load {r['load_s']:.1f} s: anon {_gib(a['RssAnon'])}, file-backed {_gib(a['RssFile'])}; one call on "
          f"{r['shape']} ({spec['tokens'](scale)} tokens): {r['forward_s']:.1f} s wall, {r['forward_cpu_s']:.1f} s "
          f"CPU (conditioning {r['conditioning_s']:.1f} s), finite {r['finite']}")
    print(f"    forward peak RSS {_gib(e['VmHWM'])}: anonymous ~{_gib(peak_anon)}, file-backed {_gib(e['RssFile'])}")
    rest = r["forward_s"] - sum(sum(v) for v in r["block_s"].values())
    rest_cpu = r["forward_cpu_s"] - sum(sum(v) for v in r["block_cpu_s"].values())
    total_cpu = rest_cpu
    total, full_file, parts, template_total, template_cpu = rest, 0, [], rest, rest_cpu
    per_block_file = {}
    prefix = spec.get("prefix", PREFIX)
    for name in spec["depth"]:
        stem = f"{prefix}{name}.0."
        per_block_file[name] = sum(math.prod(s) * 2 for n, s in shapes.items() if n.startswith(stem))
    outside = sum(math.prod(s) * 2 for n, s in shapes.items()
                  if n.startswith(prefix) and not any(n.startswith(f"{prefix}{name}.") for name in spec["depth"]))
    full_file = outside
    for name, real in spec["depth"].items():
        times = r["block_s"].get(name, [])
        per = sum(times) / len(times) if times else 0.0
        cpu_times = r["block_cpu_s"].get(name, [])
        per_cpu = sum(cpu_times) / len(cpu_times) if cpu_times else 0.0
        total += per * real
        total_cpu += per_cpu * real
        full_file += per_block_file[name] * real
        note = f"{name} {per:.2f} s/block wall, {per_cpu:.2f} s CPU"
        if scale != 1.0 and times:
            ratio = 1.0
            if name in spec.get("video_groups", spec["depth"]):  # blocks over the video tokens
                ratio = (_block_work(shapes, prefix, name, spec["tokens"](1.0), spec["width"])
                         / _block_work(shapes, prefix, name, spec["tokens"](scale), spec["width"]))
            template_total += per * ratio * real
            template_cpu += per_cpu * ratio * real
            note += (f" (template size ~{per * ratio:.1f} s wall / {per_cpu * ratio:.1f} s CPU, "
                     f"EXTRAPOLATED x{ratio:.1f})")
        parts.append(note)
    print(f"    per block: {', '.join(parts)}; rest of the call {rest:.2f} s wall, {rest_cpu:.2f} s CPU")
    depth = ", ".join(f"{n} x{c}" for n, c in spec["depth"].items())
    print(f"    full depth ({spec['params']}, {depth}), EXTRAPOLATED: {total:.0f} s wall / {total_cpu:.0f} s CPU per "
          f"call at this size"
          + (f", ~{template_total:.0f} s wall / {template_cpu:.0f} s CPU at the template's size (EXTRAPOLATED twice)"
             if scale != 1.0 else "")
          + f"; bf16 file ~{_gib(full_file)}")


def _gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    parser.add_argument("--blocks", type=int, default=1, help="blocks of each kind in the written file")
    parser.add_argument("--scale", type=float, default=1.0, help="video sides x this (1: the template's size)")
    parser.add_argument("--text-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--fp8", action="store_true", help="matrices in float8_e4m3fn (file-backed, cast per layer)")
    parser.add_argument("--measure", nargs=2, metavar=("FAMILY", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.measure is not None:
        family, path = args.measure
        print(json.dumps(measure(family, Path(path), args.scale, args.text_tokens)))
        return
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {args.blocks} block(s) of each kind, "
          f"{'fp8' if args.fp8 else 'bf16'} file, {args.threads} thread(s), {args.text_tokens} text tokens, "
          f"video sides x{args.scale}", flush=True)
    folder = Path(tempfile.mkdtemp(prefix="video_families_", dir="/tmp"))
    try:
        for family in args.families:
            spec = FAMILIES[family]
            shapes = shapes_of(family, args.blocks)
            path = folder / f"{family}.safetensors"
            started = time.perf_counter()
            size = write_file(path, shapes, args.fp8, spec.get("metadata"))
            print(f"{family}: wrote {path.name}: {_gib(size)} in {time.perf_counter() - started:.1f} s "
                  f"(load average {os.getloadavg()[0]:.1f})", flush=True)
            child = subprocess.run([sys.executable, __file__, "--measure", family, str(path), "--scale",
                                    str(args.scale), "--text-tokens", str(args.text_tokens), "--threads",
                                    str(args.threads)], capture_output=True, text=True, cwd=ROOT,
                                   env={**os.environ, "PYTHONPATH": str(ROOT)})
            path.unlink()
            if child.returncode != 0:
                print(child.stderr[-3000:])
                print(f"  FAILED (exit {child.returncode})", flush=True)
                continue
            report(family, json.loads(child.stdout.strip().splitlines()[-1]), shapes, args.scale, args.blocks)
            print(f"  (load average {os.getloadavg()[0]:.1f} after)", flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
