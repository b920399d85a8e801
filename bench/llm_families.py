"""Memory and block time of the LLM-conditioned image DiTs at full width: Z-Image, Qwen-Image,
Flux.2 (dev and Klein 4B), HiDream-I1; a few blocks each, full depth EXTRAPOLATED.

These models are big (Qwen-Image 20 B, Flux.2 dev 32 B, HiDream-I1 17 B MoE, Z-Image 6 B), so the
weights must stay in the file mapping (page cache: file-backed, reclaimable) at their stored
precision, each layer making its float32 copy only while it runs. For each family this writes a
random `.safetensors` file at the real widths with the real (ComfyUI / BFL) key names and a few
blocks, one tensor at a time (the writer never holds the model; names and shapes from
tests/fixtures/<family>_files.py at real widths), to a temporary folder under /tmp, and in a
fresh process per case loads it through UNETLoader's loader (`load_diffusion_model`: family
detection, storage policy, per-layer cast) and runs one forward (batch 1, `--text-tokens` text
tokens, `--resolution` pixels square). Cases per family:

- `bf16`: a bf16 file loaded as UNETLoader does by default. On the CPU the policy's UNet dtype is
  float32 whatever the file (ComfyUI's `unet_dtype` on the CPU), so this is the case that shows
  a whole-model cast at load: the weights become anonymous float32 memory (2x the file).
- `bf16-keep`: the same file with `weight_dtype=bfloat16` (ComfyUI's `--bf16-unet`): file-backed
  bf16; note the compute dtype is then bf16 (UNETLoader offers no bf16-storage / fp32-compute mode).
- `fp8`: the linear weights in float8_e4m3fn (1-D tensors bf16), as ComfyUI's `*_fp8_e4m3fn`
  files; kept fp8 (file-backed) and cast to float32 per layer while it runs.

Printed per case: load time; RssAnon / RssFile after the load; the forward's peak RSS (VmHWM,
reset with /proc/self/clear_refs 5 before the forward), its anonymous part (peak minus the
file-backed RSS) and the file-backed RSS; the seconds of each block (forward pre/post hooks) and
the rest of the step; then the full depth, EXTRAPOLATED: per-block seconds times the real block
counts plus the rest, and the memory the full model holds (file-backed: the file's per-block
bytes times the depth; anonymous: the measured peak, plus for `bf16` the float32 copy of every
block).

    .venv/bin/python bench/llm_families.py                          # 256x256, all families
    .venv/bin/python bench/llm_families.py --resolution 1024        # 4096 image tokens (slow on CPU)
    .venv/bin/python bench/llm_families.py --families qwen_image --cases fp8

Time on the CPU grows with the square of the resolution's side; 1024x1024 takes ~16x the
default's per-block seconds (more for attention), minutes per family on 2 shared cores.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

GIB = 1 << 30


def _zimage(blocks: int) -> dict[str, tuple[int, ...]]:
    from tests.fixtures.zimage_files import _shapes, tiny_zimage_params

    return _shapes(tiny_zimage_params(dim=3840, heads=30, layers=blocks, refiners=2, cap_feat_dim=2560))


def _qwen_image(blocks: int) -> dict[str, tuple[int, ...]]:
    from tests.fixtures.qwen_image_files import _shapes, tiny_qwen_image_params

    return _shapes(tiny_qwen_image_params(dim=3072, heads=24, layers=blocks, joint=3584))


def _flux2_dev(blocks: int) -> dict[str, tuple[int, ...]]:
    from tests.fixtures.flux2_files import _shapes, tiny_flux2_params

    return _shapes(tiny_flux2_params(hidden=6144, heads=48, depth=blocks, depth_single=blocks, context=15360))


def _flux2_klein(blocks: int) -> dict[str, tuple[int, ...]]:
    from tests.fixtures.flux2_files import _shapes, tiny_flux2_params

    return _shapes(tiny_flux2_params(hidden=3072, heads=24, depth=blocks, depth_single=blocks, context=7680,
                                     guidance=False))


def _hidream(blocks: int) -> dict[str, tuple[int, ...]]:
    from tests.fixtures import hidream_files

    # The fixture's width is its module constant; this child process sets HiDream-I1's 2560.
    hidream_files.DIM = 2560
    return hidream_files._shapes(blocks, blocks, 4, t5_width=4096, llama_width=4096, pooled_width=2048)


# name: (shapes of n blocks, real depth {block list: count}, text width, latent channels, latent down factor)
FAMILIES: dict[str, dict[str, Any]] = {
    "zimage": dict(shapes=_zimage, depth={"layers": 30, "noise_refiner": 2, "context_refiner": 2},
                   text=2560, channels=16, down=8, params="6.2 B"),
    "qwen_image": dict(shapes=_qwen_image, depth={"transformer_blocks": 60}, text=3584, channels=16, down=8,
                       params="20.4 B"),
    "flux2_dev": dict(shapes=_flux2_dev, depth={"double_blocks": 8, "single_blocks": 48}, text=15360,
                      channels=128, down=16, params="32 B"),
    "flux2_klein": dict(shapes=_flux2_klein, depth={"double_blocks": 5, "single_blocks": 20}, text=7680,
                        channels=128, down=16, params="4 B"),
    "hidream": dict(shapes=_hidream, depth={"double_stream_blocks": 16, "single_stream_blocks": 32}, text=4096,
                    channels=16, down=8, params="17 B"),
}
CASES = ("bf16", "bf16-keep", "fp8")


def llm_shapes(hidden: int, intermediate: int, heads: int, kv_heads: int, vocab: int, layers: int, *,
               qk_norm: bool = False, qkv_bias: bool = False, head_dim: int = 128) -> dict[str, tuple[int, ...]]:
    """transformers' decoder-only names and shapes (`model.embed_tokens`, `model.layers.N...`)."""
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, hidden)}
    for i in range(layers):
        b = f"model.layers.{i}."
        for proj, out in (("q", heads), ("k", kv_heads), ("v", kv_heads)):
            shapes[f"{b}self_attn.{proj}_proj.weight"] = (out * head_dim, hidden)
            if qkv_bias:
                shapes[f"{b}self_attn.{proj}_proj.bias"] = (out * head_dim,)
        shapes[f"{b}self_attn.o_proj.weight"] = (hidden, heads * head_dim)
        if qk_norm:
            shapes[f"{b}self_attn.q_norm.weight"] = (head_dim,)
            shapes[f"{b}self_attn.k_norm.weight"] = (head_dim,)
        shapes[f"{b}mlp.gate_proj.weight"] = (intermediate, hidden)
        shapes[f"{b}mlp.up_proj.weight"] = (intermediate, hidden)
        shapes[f"{b}mlp.down_proj.weight"] = (hidden, intermediate)
        shapes[f"{b}input_layernorm.weight"] = (hidden,)
        shapes[f"{b}post_attention_layernorm.weight"] = (hidden,)
    shapes["model.norm.weight"] = (hidden,)
    return shapes


# name: (file shapes of n layers, CLIPLoader type, real depth, who uses it)
ENCODERS: dict[str, dict[str, Any]] = {
    "qwen3_4b": dict(shapes=lambda n: llm_shapes(2560, 9728, 32, 8, 151936, n, qk_norm=True), clip_type="lumina2",
                     depth=36, params="4 B", used_by="Z-Image (Flux.2 Klein 4B: the same tower)"),
    "qwen25vl_7b": dict(shapes=lambda n: llm_shapes(3584, 18944, 28, 4, 152064, n, qkv_bias=True),
                        clip_type="qwen_image", depth=28, params="7 B (text part)", used_by="Qwen-Image"),
    "llama31_8b": dict(shapes=lambda n: llm_shapes(4096, 14336, 32, 8, 128256, n), clip_type="hidream",
                       depth=32, params="8 B", used_by="HiDream-I1"),
}
PROMPT = ("a photograph of an old lighthouse on a rocky coast at dusk, waves crashing against the rocks, "
          "warm light in the lantern room, seagulls in a cloudy sky, a small wooden boat tied to the pier, "
          "long exposure, soft colours, high detail, wide angle, cinematic composition, golden reflections on the "
          "wet stones, a distant mountain range behind the little harbour town")


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _tensor(name: str, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """Random float32 values scaled so activations stay O(1) through a few blocks."""
    if len(shape) == 1 and "norm" in name or name.endswith(".scale"):
        return 1.0 + 0.1 * torch.randn(shape, generator=gen)
    if name.endswith(".bias") or len(shape) == 1:
        return 0.02 * torch.randn(shape, generator=gen)
    if name.endswith("gate.weight"):
        return torch.randn(shape, generator=gen)
    return torch.randn(shape, generator=gen) / max(1, _numel(shape[1:])) ** 0.5


def _fp8_stored(name: str, shape: tuple[int, ...]) -> bool:
    """Whether an fp8 file stores this tensor in fp8: the matrices, not the pad tokens or the
    token embedding table (ComfyUI's fp8 files keep those wide)."""
    return len(shape) >= 2 and "pad_token" not in name and "embed_tokens" not in name


def write_file(path: Path, shapes: dict[str, tuple[int, ...]], fp8: bool, seed: int = 0) -> int:
    """Stream a safetensors file (header, then each tensor as it is made): matrices in fp8 when
    `fp8`, everything else bf16. Returns its size."""
    entries = []
    for name, shape in shapes.items():
        entries.append((name, "F8_E4M3" if fp8 and _fp8_stored(name, shape) else "BF16", shape))
    sizes = {"F8_E4M3": 1, "BF16": 2}
    header, offset = {}, 0
    for name, dtype, shape in entries:
        end = offset + _numel(shape) * sizes[dtype]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, end]}
        offset = end
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    gen = torch.Generator().manual_seed(seed)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for name, dtype, shape in entries:
            value = _tensor(name, shape, gen)
            value = value.to(torch.float8_e4m3fn if dtype == "F8_E4M3" else torch.bfloat16).contiguous()
            f.write(value.view(torch.uint8).numpy().tobytes() if value.numel() else b"")
            del value
    return path.stat().st_size


def _status() -> dict[str, int]:
    """Bytes of VmHWM, VmRSS, RssAnon, RssFile from /proc/self/status."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmHWM", "VmRSS", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) * 1024
    return out


def _mapped_ranges(path: Path) -> list[tuple[int, int]]:
    """Address ranges where this process maps `path` (/proc/self/maps)."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            if line.rstrip().endswith(str(path)):
                lo, hi = line.split()[0].split("-")
                out.append((int(lo, 16), int(hi, 16)))
    return out


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _inputs(family: str, spec: dict, resolution: int, text_tokens: int, blocks: int) -> tuple[torch.Tensor, dict]:
    gen = torch.Generator().manual_seed(1)
    side = resolution // spec["down"]
    x = torch.randn(1, spec["channels"], side, side, generator=gen)
    if family == "qwen_image":
        x = x.unsqueeze(2)  # Qwen-Image's latent is video-shaped [B, C, 1, h, w]
    ctx = torch.randn(1, text_tokens, spec["text"], generator=gen)
    kwargs: dict[str, Any] = {"c_crossattn": ctx}
    if family == "flux2_dev":
        kwargs["guidance"] = torch.tensor([4.0])
    if family == "hidream":  # T5 in c_crossattn; Llama states, one per block; CLIP-L + CLIP-G pooled
        kwargs["y"] = torch.randn(1, 2048, generator=gen)
        kwargs["encoder_hidden_states_llama3"] = torch.randn(1, 2 * blocks, text_tokens, 4096, generator=gen)
    return x, kwargs


def measure(family: str, case: str, path: Path, resolution: int, text_tokens: int, blocks: int) -> dict:
    """In this process: load `path` as UNETLoader does for `case`, run one forward; the figures."""
    from comfy_core.split.diffusion_model import load_diffusion_model

    spec = FAMILIES[family]
    started = time.perf_counter()
    model = load_diffusion_model(path, weight_dtype=torch.bfloat16 if case == "bf16-keep" else None)
    load_s = time.perf_counter() - started
    loaded = _status()
    module = model.model.diffusion_model
    linears = [m for m in module.modules() if isinstance(m, torch.nn.Linear)]
    ranges = _mapped_ranges(path)
    mapped = sum(1 for m in linears if any(lo <= m.weight.data_ptr() < hi for lo, hi in ranges))
    timings: dict[str, list[float]] = {}
    starts: dict[int, float] = {}
    hooks = []
    for list_name in spec["depth"]:
        for block in getattr(module, list_name):
            hooks.append(block.register_forward_pre_hook(lambda m, *_: starts.__setitem__(id(m), time.perf_counter())))
            hooks.append(block.register_forward_hook(
                lambda m, *_, n=list_name: timings.setdefault(n, []).append(time.perf_counter() - starts[id(m)])))
    x, kwargs = _inputs(family, spec, resolution, text_tokens, blocks)
    _reset_peak()
    before = _status()
    started = time.perf_counter()
    with model.applied() as dm, torch.no_grad():
        out = dm.apply_model(x, torch.tensor([0.5]), **kwargs)
    forward_s = time.perf_counter() - started
    end = _status()
    for hook in hooks:
        hook.remove()
    return {"family": model.model.family.name, "case": case, "file_bytes": path.stat().st_size,
            "weight_dtypes": sorted({str(m.weight.dtype) for m in linears}),
            "compute_dtype": str(getattr(model.model, "manual_cast_dtype", None)),
            "linears": len(linears), "linears_in_file_mapping": mapped,
            "load_s": load_s, "forward_s": forward_s, "finite": bool(torch.isfinite(out).all()),
            "after_load": loaded, "before_forward": before, "end": end, "block_s": timings,
            "tokens": (resolution // 16) ** 2}  # every family here: 16 pixels per image token


def measure_encoder(name: str, case: str, path: Path) -> dict:
    """In this process: load the encoder file as CLIPLoader does, encode PROMPT once; the figures."""
    from comfy_core.split.text_encoder_files import load_text_encoders

    spec = ENCODERS[name]
    started = time.perf_counter()
    clip = load_text_encoders([path], spec["clip_type"])
    load_s = time.perf_counter() - started
    loaded = _status()
    towers = clip.cond_stage_model
    linears = [m for m in towers.modules() if isinstance(m, torch.nn.Linear)]
    ranges = _mapped_ranges(path)
    mapped = sum(1 for m in linears if any(lo <= m.weight.data_ptr() < hi for lo, hi in ranges))
    blocks = next(m for n, m in towers.named_modules() if n.endswith("layers") and isinstance(m, torch.nn.ModuleList))
    # The towers run their decoder layers through `_block(block, ...)` (not `block(...)`, so module
    # hooks do not fire): time that method on this instance.
    tower = next(m for m in towers.modules() if hasattr(type(m), "_block"))
    times: list[float] = []
    run_block = tower._block

    def timed_block(*a: Any, **k: Any) -> Any:
        started = time.perf_counter()
        out = run_block(*a, **k)
        times.append(time.perf_counter() - started)
        return out

    tower._block = timed_block
    tokens = clip.tokenize(PROMPT)
    count = max(len(batch) for key in tokens for batch in tokens[key])
    _reset_peak()
    started = time.perf_counter()
    with torch.no_grad():
        cond = clip.encode_from_tokens(tokens)
    forward_s = time.perf_counter() - started
    end = _status()
    return {"case": case, "file_bytes": path.stat().st_size, "tokens": count, "layers": len(blocks),
            "weight_dtypes": sorted({str(m.weight.dtype) for m in linears}), "linears": len(linears),
            "linears_in_file_mapping": mapped, "load_s": load_s, "forward_s": forward_s,
            "cond_shape": list(cond.shape), "cond_dtype": str(cond.dtype), "finite": bool(torch.isfinite(cond).all()),
            "after_load": loaded, "end": end, "layer_s": times}


def report_encoder(spec: dict, r: dict, layer_bytes: int) -> None:
    a, e = r["after_load"], r["end"]
    per = sum(r["layer_s"]) / max(1, len(r["layer_s"]))
    rest = r["forward_s"] - sum(r["layer_s"])
    print(f"  [{r['case']}] linear weights {r['weight_dtypes']} ({r['linears_in_file_mapping']}/{r['linears']} views "
          f"of the file mapping), {r['layers']} layers, file {_gib(r['file_bytes'])}")
    print(f"    load {r['load_s']:.1f} s: anon {_gib(a['RssAnon'])}, file-backed {_gib(a['RssFile'])}; encode "
          f"{r['tokens']} tokens {r['forward_s']:.2f} s -> {r['cond_shape']} {r['cond_dtype']}, finite {r['finite']}")
    print(f"    encode peak RSS {_gib(e['VmHWM'])}: anonymous ~{_gib(e['VmHWM'] - e['RssFile'])}, file-backed "
          f"{_gib(e['RssFile'])}; {per:.3f} s/layer, rest {rest:.2f} s")
    print(f"    full depth ({spec['params']}, {spec['depth']} layers), EXTRAPOLATED: {rest + per * spec['depth']:.1f} s "
          f"per prompt; file ~{_gib(r['file_bytes'] + layer_bytes * (spec['depth'] - r['layers']))}")


def _gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def report(spec: dict, blocks: int, r: dict, block_bytes: dict[str, int], rest_bytes: int) -> None:
    a, e = r["after_load"], r["end"]
    peak_anon = e["VmHWM"] - e["RssFile"]
    print(f"  [{r['case']}] {r['family']}: linear weights {r['weight_dtypes']} ({r['linears_in_file_mapping']}/"
          f"{r['linears']} views of the file mapping), compute {r['compute_dtype']}, file {_gib(r['file_bytes'])}")
    print(f"    load {r['load_s']:.1f} s: anon {_gib(a['RssAnon'])}, file-backed {_gib(a['RssFile'])}; "
          f"forward {r['forward_s']:.1f} s ({r['tokens']} image tokens), finite {r['finite']}")
    print(f"    forward peak RSS {_gib(e['VmHWM'])}: anonymous ~{_gib(peak_anon)}, file-backed {_gib(e['RssFile'])}")
    rest = r["forward_s"] - sum(sum(v) for v in r["block_s"].values())
    total_s, total_file, total_anon_weights = rest, rest_bytes, 0
    parts = []
    for name, real in spec["depth"].items():
        times = r["block_s"].get(name, [])
        per = sum(times) / len(times) if times else 0.0
        parts.append(f"{name} {per:.2f} s/block")
        total_s += per * real
        total_file += block_bytes[name] * real
    print(f"    per block: {', '.join(parts)}; rest of the step {rest:.2f} s")
    full_anon = peak_anon
    if r["case"] == "bf16":  # the float32 copy grows with the depth: 2x the bf16 bytes per block
        measured = sum(block_bytes[n] * len(r["block_s"].get(n, [])) for n in spec["depth"])
        full_anon = peak_anon + 2 * (total_file - rest_bytes - measured)
    print(f"    full depth ({spec['params']}, {', '.join(f'{n} x{c}' for n, c in spec['depth'].items())}), "
          f"EXTRAPOLATED: {total_s:.0f} s/step; file {_gib(total_file)}; "
          f"anonymous ~{_gib(full_anon)}{' (whole model float32)' if r['case'] == 'bf16' else ''}")


def _bytes_by_group(shapes: dict[str, tuple[int, ...]], depth: dict[str, int], fp8: bool) -> tuple[dict[str, int], int]:
    """Bytes of ONE block of each group in the file, and of everything outside the blocks."""
    per: dict[str, int] = {name: 0 for name in depth}
    rest = 0
    for name, shape in shapes.items():
        size = _numel(shape) * (1 if fp8 and _fp8_stored(name, shape) else 2)
        group = name.split(".")[0]
        if group in per and name.split(".")[1] == "0":
            per[group] += size
        elif group not in per:
            rest += size
    return per, rest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", nargs="*", default=list(FAMILIES), choices=list(FAMILIES))
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--encoders", nargs="*", default=list(ENCODERS), choices=list(ENCODERS))
    parser.add_argument("--blocks", type=int, default=1, help="blocks of each kind in the written file")
    parser.add_argument("--resolution", type=int, default=256, help="image side in pixels")
    parser.add_argument("--text-tokens", type=int, default=77)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--measure", nargs=3, metavar=("FAMILY", "CASE", "PATH"), help=argparse.SUPPRESS)
    parser.add_argument("--measure-encoder", nargs=3, metavar=("NAME", "CASE", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.measure_encoder is not None:
        name, case, path = args.measure_encoder
        print(json.dumps(measure_encoder(name, case, Path(path))))
        return
    if args.measure is not None:
        family, case, path = args.measure
        print(json.dumps(measure(family, case, Path(path), args.resolution, args.text_tokens, args.blocks)))
        return
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {args.resolution}x{args.resolution}, "
          f"{args.text_tokens} text tokens, {args.blocks} block(s) of each kind, {args.threads} thread(s)", flush=True)
    folder = Path(tempfile.mkdtemp(prefix="llm_families_", dir="/tmp"))
    try:
        for family in args.families:
            spec = FAMILIES[family]
            shapes = spec["shapes"](args.blocks)
            print(f"{family}:", flush=True)
            for fp8 in sorted({c == "fp8" for c in args.cases}):
                path = folder / f"{family}_{'fp8' if fp8 else 'bf16'}.safetensors"
                started = time.perf_counter()
                size = write_file(path, shapes, fp8)
                print(f"  wrote {path.name}: {_gib(size)} in {time.perf_counter() - started:.1f} s", flush=True)
                for case in [c for c in args.cases if (c == "fp8") == fp8]:
                    child = subprocess.run([sys.executable, __file__, "--measure", family, case, str(path),
                                            "--resolution", str(args.resolution), "--text-tokens",
                                            str(args.text_tokens), "--blocks", str(args.blocks),
                                            "--threads", str(args.threads)],
                                           capture_output=True, text=True, cwd=ROOT,
                                           env={**os.environ, "PYTHONPATH": str(ROOT)})
                    if child.returncode != 0:
                        print(child.stderr[-3000:])
                        print(f"  [{case}] FAILED (exit {child.returncode})", flush=True)
                        continue
                    result = json.loads(child.stdout.strip().splitlines()[-1])
                    report(spec, args.blocks, result, *_bytes_by_group(shapes, spec["depth"], fp8))
                    sys.stdout.flush()
                path.unlink()
        for name in args.encoders:
            spec = ENCODERS[name]
            shapes = spec["shapes"](max(2, args.blocks))
            print(f"{name} encoder ({spec['used_by']}, CLIPLoader type {spec['clip_type']!r}):", flush=True)
            for fp8 in (False, True):
                case = "fp8" if fp8 else "bf16"
                path = folder / f"{name}_{case}.safetensors"
                size = write_file(path, shapes, fp8)
                print(f"  wrote {path.name}: {_gib(size)}", flush=True)
                child = subprocess.run([sys.executable, __file__, "--measure-encoder", name, case, str(path),
                                        "--threads", str(args.threads)], capture_output=True, text=True, cwd=ROOT,
                                       env={**os.environ, "PYTHONPATH": str(ROOT)})
                path.unlink()
                if child.returncode != 0:
                    print(child.stderr[-2000:])
                    print(f"  [{case}] FAILED (exit {child.returncode})", flush=True)
                    continue
                layer = sum(_numel(s) * (1 if fp8 and _fp8_stored(k, s) else 2) for k, s in shapes.items()
                            if k.startswith("model.layers.0."))
                report_encoder(spec, json.loads(child.stdout.strip().splitlines()[-1]), layer)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
