"""Benchmark: ComfyUI's quantised diffusion-model formats, loaded and run here.

Writes one Z-Image-shaped NextDiT (tests/fixtures/zimage_files.py's network, default width 768,
ffn 2048, 2 blocks + 1 + 1 refiners: real key names, ~30 M parameters) as fp32, bf16 and, with its
block linear layers quantised as ComfyUI's quantisers write them, in each format
(comfy_core/weights/quant_*.py): int8 ConvRot (group 256), int8 tensor-wise, fp8 e4m3 and e5m2
(per-tensor scale), MXFP8 (per-32 E8M0 scales), NVFP4 (per-16 fp8 scales + tensor scale); int8
ConvRot again computed as comfy-kitchen's W8A8 product (`int8_matmul`); and GGUF Q8_0 / Q4_0 files
(written by gguf-py, read natively: comfy_core/weights/quant_gguf.py). Each file is loaded by
UNETLoader's path (`load_diffusion_model`) in a fresh process, which reports:

- file size; load time (wall, page cache warm: the file was just written);
- anonymous memory after load (RssAnon growth over the process before the load: the bytes the
  model holds in its own memory; file-backed views of the weights do not count);
- one forward (`apply_model`, a 32x32 latent, 16 caption tokens; the median of 3 after one
  warm-up) against the fp32 and bf16 files' forwards;
- the output's largest error against the fp32 model's, relative to that output's largest value.

Prints one line per format. Usage: `.venv/bin/python bench/quant_formats.py [--dim 768] [--threads 2]`.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {  # name: (format or None for a float file, quantiser options)
    "fp32": (None, {}),
    "bf16": (None, {}),
    "int8_convrot": ("int8_tensorwise", {"convrot": True}),
    "int8_convrot_w8a8": ("int8_tensorwise", {"convrot": True}),
    "int8_tensorwise": ("int8_tensorwise", {}),
    "fp8_e4m3fn": ("float8_e4m3fn", {}),
    "fp8_e5m2": ("float8_e5m2", {}),
    "mxfp8": ("mxfp8", {}),
    "nvfp4": ("nvfp4", {}),
    "gguf_q8_0": ("gguf", {"type": "Q8_0"}),  # written by gguf-py (not a ComfyUI format: the GGUF pack's files)
    "gguf_q4_0": ("gguf", {"type": "Q4_0"}),
}


def _write_gguf(path: Path, state: dict, qtype: str, blocks: tuple[str, ...]) -> None:
    """`state` as a GGUF file as ComfyUI-GGUF's conversions store a diffusion model: the block layers'
    2-D weights quantised to `qtype` where their rows are whole blocks, the rest F32."""
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), "lumina2")
    kind = getattr(gguf.GGMLQuantizationType, qtype)
    for name, tensor in state.items():
        array = tensor.float().numpy()
        if name.startswith(blocks) and name.endswith(".weight") and tensor.dim() == 2 and tensor.shape[1] % 32 == 0:
            writer.add_tensor(name, gguf.quants.quantize(array, kind), raw_dtype=kind)
        else:
            writer.add_tensor(name, np.ascontiguousarray(array, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _rss_anon_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    return 0


def _child(path: Path, out: Path, w8a8: bool, threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    from comfy_core.split.diffusion_model import load_diffusion_model
    from comfy_core.models.quant_linear import QuantizedLinear

    before = _rss_anon_kib()
    started = time.perf_counter()
    model = load_diffusion_model(path)
    load_s = time.perf_counter() - started
    anon_mib = (_rss_anon_kib() - before) / 1024
    if w8a8:
        for layer in model.model.modules():
            if isinstance(layer, QuantizedLinear):
                layer.int8_matmul = True
    dm = model.model
    gen = torch.Generator().manual_seed(0)
    x, sigma = torch.randn(1, 16, 32, 32, generator=gen), torch.tensor([0.7])
    cond = torch.randn(1, 16, dm.diffusion_model.cap_embedder[1].in_features, generator=gen)
    times = []
    with model.applied() as applied, torch.no_grad():
        for _ in range(4):
            started = time.perf_counter()
            y = applied.apply_model(x, sigma, c_crossattn=cond)
            times.append(time.perf_counter() - started)
    torch.save(y, out)
    print(json.dumps({"load_s": load_s, "anon_mib": anon_mib, "forward_s": sorted(times[1:])[1]}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(Path(args.child[0]), Path(args.child[1]), args.child[2] == "1", args.threads)
        return
    import torch
    from safetensors.torch import save_file

    sys.path.insert(0, str(ROOT))
    from tests.fixtures.template_models_quant import quantize_state
    from tests.fixtures.zimage_files import tiny_zimage_state_dict

    state = tiny_zimage_state_dict(seed=0, dim=args.dim, heads=args.dim // 64, layers=2, refiners=1)
    blocks = ("layers.", "noise_refiner.", "context_refiner.")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (fmt, options) in VARIANTS.items():
            path = Path(tmp) / f"{name}.{'gguf' if fmt == 'gguf' else 'safetensors'}"
            if fmt == "gguf":
                _write_gguf(path, state, options["type"], blocks)
            elif fmt is None:
                dtype = torch.float32 if name == "fp32" else torch.bfloat16
                save_file({k: v.to(dtype).contiguous() for k, v in state.items()}, str(path))
            else:
                tensors, metadata = quantize_state(state, fmt, select=lambda n: n.startswith(blocks), **options)
                save_file(tensors, str(path), metadata=metadata or None)
            out = Path(tmp) / f"{name}.pt"
            env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONPATH": str(ROOT)}
            done = subprocess.run([sys.executable, __file__, "--threads", str(args.threads), "--child", str(path),
                                   str(out), "1" if name.endswith("w8a8") else "0"],
                                  capture_output=True, text=True, env=env, cwd=ROOT, check=True)
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            figures["size_mib"] = path.stat().st_size / 2 ** 20
            figures["out"] = torch.load(out)
            results[name] = figures
        reference = results["fp32"]["out"]
        print(f"Z-Image-shaped NextDiT, width {args.dim}, {args.threads} threads; error vs the fp32 model's output")
        for name, f in results.items():
            error = float((f["out"] - reference).abs().max() / reference.abs().max())
            print(f"{name:18s} file {f['size_mib']:7.1f} MiB  load {f['load_s']:6.2f} s  anon {f['anon_mib']:7.1f} MiB  "
                  f"forward {f['forward_s'] * 1e3:8.1f} ms (x{f['forward_s'] / results['fp32']['forward_s']:.2f} fp32, "
                  f"x{f['forward_s'] / results['bf16']['forward_s']:.2f} bf16)  max error {error:.2e}")


if __name__ == "__main__":
    main()
