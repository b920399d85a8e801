"""Peak memory of a Wan 14 B-width DiT kept at scaled fp8: load + one forward, on the CPU.

ComfyUI's `wan2.1_t2v_14B_fp8_scaled` / `wan2.2_*_14B_fp8_scaled` files hold each linear weight
in float8_e4m3fn with a float32 `scale_weight`; UNETLoader keeps them so (comfy_core/models/
storage_cast.py `keep_scaled_fp8`): the weights stay views of the file mapping (page cache,
file-backed, reclaimable) and each layer makes its compute-dtype copy only while it runs. This
writes random files of that layout at Wan 14 B's widths (dim 5120, ffn 13824, 40 heads, text 4096)
with a few blocks each, one tensor at a time (the writer never holds the model), loads each in a
fresh process through `load_diffusion_model` (family detection and all, the real Wan DiT when
comfy_core/families/wan/dit.py is there) and runs one forward, reading /proc/self/status: peak RSS
(VmHWM) and the anonymous / file-backed split (RssAnon / RssFile) after the load and after every
block of the forward. The files go to a temporary folder under /tmp and are deleted afterwards.

    .venv/bin/python bench/wan_memory.py                      # 1 and 4 blocks, 256 tokens
    .venv/bin/python bench/wan_memory.py --blocks 40          # the whole 14 B model (a ~14 GB file)

A 40-block figure is the full model; for fewer blocks, the per-block file-backed growth times 40
plus the anonymous peak is what the whole model takes (the anonymous part does not grow with
the number of blocks: activations and one layer's float32 weight copy).
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

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Wan 14 B (t2v): ComfyUI's repackaged names and shapes.
DIM, FFN, TEXT, FREQ, IN, OUT = 5120, 13824, 4096, 256, 16, 16
GIB = 1 << 30


def wan14b_shapes(blocks: int) -> dict[str, tuple[tuple[int, ...], bool]]:
    """`{name: (shape, is a linear weight)}` of a Wan 14 B t2v model with `blocks` blocks."""
    shapes: dict[str, tuple[tuple[int, ...], bool]] = {}

    def linear(name: str, fan_in: int, fan_out: int) -> None:
        shapes[name + ".weight"] = ((fan_out, fan_in), True)
        shapes[name + ".bias"] = ((fan_out,), False)

    shapes["patch_embedding.weight"] = ((DIM, IN, 1, 2, 2), False)
    shapes["patch_embedding.bias"] = ((DIM,), False)
    linear("text_embedding.0", TEXT, DIM)
    linear("text_embedding.2", DIM, DIM)
    linear("time_embedding.0", FREQ, DIM)
    linear("time_embedding.2", DIM, DIM)
    linear("time_projection.1", DIM, 6 * DIM)
    for b in range(blocks):
        for attn in ("self_attn", "cross_attn"):
            for proj in ("q", "k", "v", "o"):
                linear(f"blocks.{b}.{attn}.{proj}", DIM, DIM)
            shapes[f"blocks.{b}.{attn}.norm_q.weight"] = ((DIM,), False)
            shapes[f"blocks.{b}.{attn}.norm_k.weight"] = ((DIM,), False)
        shapes[f"blocks.{b}.norm3.weight"] = ((DIM,), False)
        shapes[f"blocks.{b}.norm3.bias"] = ((DIM,), False)
        linear(f"blocks.{b}.ffn.0", DIM, FFN)
        linear(f"blocks.{b}.ffn.2", FFN, DIM)
        shapes[f"blocks.{b}.modulation"] = ((1, 6, DIM), False)
    linear("head.head", DIM, 4 * OUT)
    shapes["head.modulation"] = ((1, 2, DIM), False)
    return shapes


def _entries(blocks: int) -> list[tuple[str, str, tuple[int, ...]]]:
    """(name, safetensors dtype, shape) of the scaled-fp8 file, in file order."""
    out = []
    for name, (shape, is_linear) in wan14b_shapes(blocks).items():
        if is_linear:
            out.append((name, "F8_E4M3", shape))
            out.append((name[:-len("weight")] + "scale_weight", "F32", ()))
        else:
            out.append((name, "F32", shape))
    out.append(("scaled_fp8", "F8_E4M3", (0,)))
    return out


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _tensor(name: str, dtype: str, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    if dtype == "F8_E4M3":
        # Uniform fp8 codes without the NaN ones (0x7f, 0xff): cheap to make at 14 B values.
        codes = torch.randint(0, 256, shape, dtype=torch.uint8, generator=gen)
        codes[(codes & 0x7F) == 0x7F] -= 1
        return codes
    if not shape:  # a scale: the fp8 code values (|x| ~ 100) times this are ~ 1/sqrt(fan in)
        return torch.tensor(1.0 / (100.0 * DIM ** 0.5))
    values = torch.randn(shape, generator=gen)
    if "norm" in name:
        return 1.0 + 0.1 * values if name.endswith("weight") else 0.1 * values
    if "modulation" in name:
        return 0.5 * values
    return values / max(1, _numel(shape[1:]) if len(shape) > 1 else shape[0]) ** 0.5


def write_scaled_fp8_file(path: Path, blocks: int, seed: int = 0) -> int:
    """Stream the file to `path` (safetensors: header, then each tensor as it is made); its size."""
    entries = _entries(blocks)
    sizes = {"F8_E4M3": 1, "F32": 4}
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
            tensor = _tensor(name, dtype, shape, gen).contiguous()
            f.write(tensor.numpy().tobytes() if tensor.numel() else b"")
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


def measure(path: Path, tokens: int, context: int, threads: int) -> dict:
    """In this process: load `path` with UNETLoader's loader, run one forward; memory figures."""
    torch.set_num_threads(threads)
    from comfy_core.split.diffusion_model import load_diffusion_model

    base = _status()
    started = time.perf_counter()
    model = load_diffusion_model(path)
    load_s = time.perf_counter() - started
    loaded = _status()
    module = model.model.diffusion_model
    layers = {type(m).__name__ for m in module.modules() if isinstance(m, torch.nn.Linear)}
    dtypes = sorted({str(m.weight.dtype) for m in module.modules() if isinstance(m, torch.nn.Linear)})
    samples: list[dict[str, int]] = []
    hooks = [block.register_forward_hook(lambda *_: samples.append(_status())) for block in module.blocks]
    side = int(round(tokens ** 0.5)) * 2  # latent side: tokens = (side / 2)^2 at Wan's 2x2 patches
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(1, IN, 1, side, side, generator=gen)
    ctx = torch.randn(1, context, TEXT, generator=gen)
    started = time.perf_counter()
    with model.applied() as dm, torch.no_grad():
        out = dm.apply_model(x, torch.tensor([0.5]), c_crossattn=ctx)
    forward_s = time.perf_counter() - started
    for hook in hooks:
        hook.remove()
    end = _status()
    return {"file_bytes": path.stat().st_size, "blocks": len(module.blocks), "tokens": (side // 2) ** 2,
            "context": context, "linear_classes": sorted(layers), "linear_weight_dtypes": dtypes,
            "family": model.model.family.name, "load_s": load_s, "forward_s": forward_s,
            "finite": bool(torch.isfinite(out).all()), "start": base, "after_load": loaded, "end": end,
            "peak_anon_in_forward": max(s["RssAnon"] for s in samples),
            "peak_file_in_forward": max(s["RssFile"] for s in samples)}


def _gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


def report(r: dict) -> None:
    print(f"  {r['blocks']} block(s), {r['family']}, linear layers {r['linear_classes']} {r['linear_weight_dtypes']}, "
          f"file {_gib(r['file_bytes'])}, {r['tokens']} tokens + {r['context']} text tokens")
    print(f"    load {r['load_s']:.1f} s, forward {r['forward_s']:.1f} s, output finite: {r['finite']}")
    for stage in ("start", "after_load", "end"):
        s = r[stage]
        print(f"    {stage:10s} RSS {_gib(s['VmRSS'])}  anon {_gib(s['RssAnon'])}  file {_gib(s['RssFile'])}")
    print(f"    during the forward: peak anon {_gib(r['peak_anon_in_forward'])}, peak file-backed "
          f"{_gib(r['peak_file_in_forward'])}; process peak RSS (VmHWM) {_gib(r['end']['VmHWM'])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--tokens", type=int, default=256, help="video tokens (latent patches) of the forward")
    parser.add_argument("--context", type=int, default=512, help="text tokens (Wan pads umT5's output to 512)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # the child process's mode
    args = parser.parse_args()
    if args.measure is not None:
        print(json.dumps(measure(args.measure, args.tokens, args.context, args.threads)))
        return
    folder = Path(tempfile.mkdtemp(prefix="wan_memory_", dir="/tmp"))
    results = []
    try:
        for blocks in args.blocks:
            path = folder / f"wan2.1_t2v_14B_{blocks}blocks_fp8_scaled.safetensors"
            started = time.perf_counter()
            size = write_scaled_fp8_file(path, blocks)
            print(f"wrote {path.name}: {_gib(size)} in {time.perf_counter() - started:.1f} s", flush=True)
            child = subprocess.run([sys.executable, __file__, "--measure", str(path), "--tokens", str(args.tokens),
                                    "--context", str(args.context), "--threads", str(args.threads)],
                                   capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
            if child.returncode != 0:
                print(child.stderr[-4000:])
                raise SystemExit(f"measuring {blocks} block(s) failed (exit {child.returncode})")
            result = json.loads(child.stdout.strip().splitlines()[-1])
            results.append(result)
            report(result)
            path.unlink()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if len(results) >= 2:
        a, b = results[0], results[-1]
        per_block = (b["peak_file_in_forward"] - a["peak_file_in_forward"]) / (b["blocks"] - a["blocks"])
        anon = max(r["peak_anon_in_forward"] for r in results)
        whole = a["peak_file_in_forward"] + per_block * (40 - a["blocks"])
        print(f"per block: {_gib(int(per_block))} file-backed; the 40-block 14 B model: ~{_gib(int(whole))} "
              f"file-backed (page cache) + ~{_gib(anon)} anonymous at this token count "
              f"(bfloat16 dequantization would hold ~{_gib(int(2 * whole))} anonymous)")


if __name__ == "__main__":
    main()
