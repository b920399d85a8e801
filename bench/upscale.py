"""Throughput and peak memory of ImageUpscaleWithModel's path with a full-size ESRGAN (random weights).

    .venv/bin/python bench/upscale.py [--size 1024] [--tiling-size 2048] [--filters 64] [--blocks 23]

"model": a 4x RRDBNet at ESRGAN / RealESRGAN_x4plus's real size (64 filters, 23 blocks, 16.7 M
parameters), loaded through spandrel from a random state dict with the real key names, upscales
a random `size`x`size` image with `comfy_core.upscale.run.upscale_image` (512-pixel tiles,
overlap 32, on CUDA when available, the result gathered on the CPU). "tiling": the tiling alone
(`tiled_scale`, tile 512 / overlap 32, a nearest 4x function for the model) on a
`tiling-size`x`tiling-size` image, to show what the blending holds beside its output: ComfyUI's
function holds three output-sized buffers, this one the output plus a band of weights and a few
tile-sized temporaries. Each case runs in a fresh subprocess; peak memory is the growth of the
process's peak resident set (CPU; with `MALLOC_MMAP_THRESHOLD_=65536`, so that glibc returns
large freed blocks at once) or of `torch.cuda.max_memory_allocated` (CUDA), from just before the
timed call (bench/peak.py). The "model" case on CUDA also reports the CPU-side growth.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _case(mode: str, size: int, filters: int, blocks: int) -> dict:
    """Runs inside the subprocess: one case; returns the figures."""
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, str(ROOT))
    from bench.peak import time_and_peak
    from comfy_core.upscale.loading import model_from_state_dict
    from comfy_core.upscale.run import OVERLAP, TILE, tile_steps, upscale_image
    from comfy_core.upscale.tiling import tiled_scale
    from tests.fixtures.upscale_models import esrgan_state_dict

    image = torch.rand(1, size, size, 3, generator=torch.Generator().manual_seed(0))
    if mode == "tiling":
        planes = image.movedim(-1, 1)

        def run() -> torch.Tensor:
            return tiled_scale(planes, lambda t: F.interpolate(t, scale_factor=4, mode="nearest"),
                               tile_x=TILE, tile_y=TILE, overlap=OVERLAP, upscale_amount=4)
        figures = time_and_peak(run, torch.device("cpu"), 1)
        figures["tiles"] = tile_steps(image)
        return figures

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = model_from_state_dict(esrgan_state_dict("old", scale=4, num_filters=filters, num_blocks=blocks))
    upscale_image(model, torch.rand(1, 16, 16, 3), device=device)  # warm-up: kernels, the first move
    cpu_base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    figures = time_and_peak(lambda: upscale_image(model, image, device=device), device, 1)
    figures["cpu_peak_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - cpu_base
    figures["tiles"] = tile_steps(image)
    figures["parameters"] = sum(p.numel() for p in model.model.parameters())
    return figures


def _run(spec: dict) -> dict | None:
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    done = subprocess.run([sys.executable, __file__, "--_case", json.dumps(spec)], capture_output=True, text=True,
                          env=env)
    if done.returncode != 0:
        print(f"{spec['mode']:>7}: failed: {done.stderr.strip().splitlines()[-1:]}")
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1024, help="model case: input side in pixels (output 4x)")
    parser.add_argument("--tiling-size", type=int, default=2048, help="tiling case: input side in pixels")
    parser.add_argument("--filters", type=int, default=64, help="RRDBNet filters (ESRGAN: 64)")
    parser.add_argument("--blocks", type=int, default=23, help="RRDB blocks (ESRGAN: 23)")
    parser.add_argument("--skip-model", action="store_true", help="only the tiling case")
    parser.add_argument("--_case", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._case:
        print(json.dumps(_case(**json.loads(args._case))))
        return

    mib = 2 ** 20
    side = args.tiling_size
    result = _run({"mode": "tiling", "size": side, "filters": args.filters, "blocks": args.blocks})
    if result:
        output = 3 * (4 * side) ** 2 * 4
        print(f" tiling: {side}x{side} -> {4 * side}x{4 * side}, {result['tiles']} tiles, {result['seconds']:.2f} s; "
              f"peak +{result['peak_bytes'] / mib:.0f} MiB = output {output / mib:.0f} MiB "
              f"+ {(result['peak_bytes'] - output) / mib:.0f} MiB (ComfyUI's three buffers: {3 * output / mib:.0f} MiB)")
    if args.skip_model:
        return
    side = args.size
    result = _run({"mode": "model", "size": side, "filters": args.filters, "blocks": args.blocks})
    if result:
        out_mp = (4 * side) ** 2 / 1e6
        line = (f"  model: RRDBNet {args.filters}nf {args.blocks}nb ({result['parameters'] / 1e6:.1f} M params) on "
                f"{result['device']}: {side}x{side} -> {4 * side}x{4 * side} in {result['seconds']:.1f} s, "
                f"{out_mp / result['seconds']:.3f} output MP/s, {side * side / 1e6 / result['seconds']:.4f} input MP/s, "
                f"{result['tiles']} tiles; peak +{result['peak_bytes'] / mib:.0f} MiB")
        if result["device"].startswith("cuda"):
            line += f" on the GPU, +{result['cpu_peak_bytes'] / mib:.0f} MiB on the CPU"
        print(line + f" (output {3 * (4 * side) ** 2 * 4 / mib:.0f} MiB)")


if __name__ == "__main__":
    main()
