"""Benchmark: one Wan DiT block at 832x480x81 frames, seconds per block forward for the Wan 2.1
1.3 B width (dim 1536, 12 heads, FFN 8960, 30 blocks) and the 14 B width (dim 5120, 40 heads,
FFN 13824, 40 blocks), and the per-step figure EXTRAPOLATED from it.

832x480 pixels and 81 frames are latent 104x60x21 (8x spatial, 4x temporal + 1), cut into 1x2x2
patches: 21 x 30 x 52 = 32760 video tokens, self-attending over all of them, cross-attending to
512 umT5 tokens. The whole model does not fit / takes hours per step on the CPU, so ONE block
(`comfy_core.families.wan.blocks.WanAttentionBlock`, random weights, the Wan t2v block) runs on
inputs of the real shapes: the tokens, the 6-row time modulation, the 3-D RoPE rotations of that
grid (`WanModel.rope_encode`) and the projected text context. A step of the full model is about
`blocks x seconds per block` (the embeddings and head are small next to it), for ONE batch row:
with CFG (cond + uncond) a step runs two rows, about twice that. The figures are printed with
how they were derived.

    .venv/bin/python bench/wan_dit.py                         # both widths, CPU, float32
    .venv/bin/python bench/wan_dit.py --widths 1.3b --frames 21 --height 480 --width 832
    .venv/bin/python bench/wan_dit.py --device cuda --dtype bf16 --runs 3

`--frames`, `--height`, `--width` are in pixels / frames (the latent grid is derived as the Wan
VAE does); `--threads` sets torch's CPU threads (default: torch's).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere: the repository's packages

WIDTHS = {"1.3b": dict(dim=1536, heads=12, ffn=8960, blocks=30), "14b": dict(dim=5120, heads=40, ffn=13824, blocks=40)}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def latent_grid(frames: int, height: int, width: int) -> tuple[int, int, int]:
    """Latent frames, rows, columns of a Wan 2.1 video: (frames - 1) // 4 + 1, height / 8, width / 8."""
    return (frames - 1) // 4 + 1, height // 8, width // 8


def build_block(spec: dict, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    from comfy_core.families.wan.blocks import WanAttentionBlock

    block = WanAttentionBlock("t2v_cross_attn", spec["dim"], spec["ffn"], spec["heads"], qk_norm=True,
                              cross_attn_norm=True, device=device, dtype=dtype)
    generator = torch.Generator(device="cpu").manual_seed(0)
    with torch.no_grad():
        for name, param in block.named_parameters():
            values = torch.randn(param.shape, generator=generator)
            if "norm" in name:
                values = 1.0 + 0.1 * values
            elif param.ndim > 1 and "modulation" not in name:
                values = values / param.shape[-1] ** 0.5
            param.copy_(values.to(dtype))
    return block.eval()


def block_inputs(spec: dict, grid: tuple[int, int, int], device: torch.device, dtype: torch.dtype) -> dict:
    from comfy_core.families.wan.dit import WanModel

    t, h, w = grid
    # The RoPE table of the grid: a 0-layer WanModel of the same head width gives it.
    rope = WanModel(dim=spec["dim"], num_heads=spec["heads"], ffn_dim=8, num_layers=0, text_dim=8, device="meta")
    freqs = rope.rope_encode(t, h, w, device=device, dtype=torch.float32)  # [1, L, 1, D/2, 2, 2]
    tokens = freqs.shape[1]
    generator = torch.Generator(device="cpu").manual_seed(1)
    x = torch.randn(1, tokens, spec["dim"], generator=generator).to(device, dtype)
    e0 = (0.1 * torch.randn(1, 6, spec["dim"], generator=generator)).to(device, dtype)
    context = torch.randn(1, 512, spec["dim"], generator=generator).to(device, dtype)
    return {"x": x, "e": e0, "freqs": freqs, "context": context, "context_img_len": None}


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def time_block(block: torch.nn.Module, inputs: dict, runs: int, device: torch.device) -> tuple[list[float], list[float]]:
    """Wall seconds and process CPU seconds (all threads) of each run: on a shared machine the
    CPU time over the thread count is what the block costs when it has the cores to itself."""
    times, cpu = [], []
    for _ in range(runs):
        if device.type == "cuda":
            torch.cuda.synchronize()
        started, cpu_started = time.perf_counter(), time.process_time()
        with torch.inference_mode():
            block(**inputs)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
        cpu.append(time.process_time() - cpu_started)
    return times, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--widths", default="1.3b,14b")
    parser.add_argument("--frames", type=int, default=81)
    parser.add_argument("--height", type=int, default=480)
    parser.add_argument("--width", type=int, default=832)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="fp32", choices=sorted(DTYPES))
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="one JSON line per width")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device, dtype = torch.device(args.device), DTYPES[args.dtype]
    grid = latent_grid(args.frames, args.height, args.width)
    for name in args.widths.split(","):
        spec = WIDTHS[name]
        block = build_block(spec, device, dtype)
        inputs = block_inputs(spec, grid, device, dtype)
        tokens = inputs["x"].shape[1]
        warm = {**inputs, "x": inputs["x"][:, :1024], "freqs": inputs["freqs"][:, :1024]}
        time_block(block, warm, 1, device)  # kernels, allocator
        times, cpu = time_block(block, inputs, args.runs, device)
        per_block = statistics.median(times)
        per_block_cpu = statistics.median(cpu)
        result = {"width": name, "dim": spec["dim"], "heads": spec["heads"], "ffn": spec["ffn"], "tokens": tokens,
                  "latent_grid": grid, "device": args.device, "dtype": args.dtype, "threads": torch.get_num_threads(),
                  "seconds_per_block": round(per_block, 3), "runs": [round(t, 3) for t in times],
                  "cpu_seconds_per_block": round(per_block_cpu, 3), "load_average": os.getloadavg()[0],
                  "blocks": spec["blocks"], "seconds_per_step_estimate": round(per_block * spec["blocks"], 1),
                  "seconds_per_cfg_step_estimate": round(2 * per_block * spec["blocks"], 1),
                  "peak_rss_mib": round(peak_rss_mib())}
        if device.type == "cuda":
            result["cuda_peak_mib"] = round(torch.cuda.max_memory_allocated() / 2**20)
        if args.json:
            print(json.dumps(result))
        else:
            print(f"Wan {name} width (dim {spec['dim']}, {spec['heads']} heads, FFN {spec['ffn']}), "
                  f"{args.width}x{args.height}x{args.frames} -> latent {grid[0]}x{grid[1]}x{grid[2]} = {tokens} tokens, "
                  f"{args.device} {args.dtype}, {torch.get_num_threads()} threads:")
            print(f"  one block forward: {per_block:.2f} s wall (runs {result['runs']}), {per_block_cpu:.2f} s CPU "
                  f"over all threads; load average {result['load_average']:.1f}")
            print(f"  per step (EXTRAPOLATED: {spec['blocks']} blocks x one block, batch 1): "
                  f"{result['seconds_per_step_estimate']:.0f} s; with CFG (2 rows): "
                  f"{result['seconds_per_cfg_step_estimate']:.0f} s")
            print(f"  peak RSS so far: {result['peak_rss_mib']} MiB")
        del block, inputs


if __name__ == "__main__":
    main()
