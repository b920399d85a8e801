"""Benchmark: `torch.compile` of the UNet (what TorchCompileModel does at the first sampling step).

On one random SD1.5 UNet (full size unless `--tiny`; bench/cpu_precision.py builds the weights),
64x64 latent (8x8 with `--tiny`), batch 2, fp32, `--threads` threads, prints (never asserts):

- seconds per UNet forward eager, median of `--runs` after one warm-up;
- the compile: wall time of the first compiled call, and the part TorchDynamo and the backend
  spent compiling (their compile start/end callbacks, comfy_core/patching/torch_compile.py's
  `CompileClock`, the figure the node logs);
- seconds per forward compiled, median of `--runs`, alternating with eager runs, and the ratio;
- the largest difference between the compiled and the eager output (same input).

Usage: `.venv/bin/python bench/torch_compile.py [--tiny] [--backend inductor] [--threads 2] [--runs 3]`.
Inductor on the CPU builds C++ kernels: the full-size compile takes minutes on a small machine.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from bench.cpu_precision import context_width, load, logging_quiet, sd15_state_dict  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="the tiny test checkpoint (quick run)")
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    logging_quiet()
    from comfy_core.patching.torch_compile import CompileClock, check_backend

    check_backend(args.backend, torch.device("cpu"))
    latent, batch = (8 if args.tiny else 64), 2
    model, _ = load(sd15_state_dict(args.tiny), None)
    unet = model.model.diffusion_model
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 4, latent, latent, generator=gen)
    t_in = torch.full((batch,), 500.0)
    ctx = torch.randn(batch, 77, context_width(model), generator=gen)
    print(f"{'tiny SD1' if args.tiny else 'SD1.5 full size'} UNet, {latent}x{latent} latent, batch {batch}, fp32, "
          f"{args.threads} threads, backend {args.backend!r}, torch {torch.__version__}, "
          f"CPU capability {torch.backends.cpu.get_cpu_capability()}")

    def timed(fn) -> tuple[float, torch.Tensor]:
        t = time.perf_counter()
        out = fn(x, t_in, ctx)
        return time.perf_counter() - t, out

    with torch.no_grad():
        timed(unet)  # warm-up
        compiled = torch.compile(unet, backend=args.backend)
        with CompileClock() as clock:
            first, out_compiled = timed(compiled)
        print(f"compile: first compiled call {first:.1f} s, of which compiling {clock.seconds:.1f} s "
              f"({clock.compiles} graph{'s' if clock.compiles != 1 else ''})")
        eager_times, compiled_times = [], []
        for _ in range(args.runs):  # alternating, so a neighbour's load falls on both
            seconds, out_eager = timed(unet)
            eager_times.append(seconds)
            seconds, out_compiled = timed(compiled)
            compiled_times.append(seconds)
    eager, fast = statistics.median(eager_times), statistics.median(compiled_times)
    print(f"forward: eager {eager:.3f} s   compiled {fast:.3f} s   compiled/eager {fast / eager:.2f}x")
    diff = (out_compiled - out_eager).abs()
    print(f"compiled vs eager output: max |d| {float(diff.max()):.3g}, mean |d| {float(diff.mean()):.3g} "
          f"(output max |x| {float(out_eager.abs().max()):.3g})")
    if first > 0 and eager > fast:
        print(f"break-even after about {clock.seconds / (eager - fast):.0f} forwards")


if __name__ == "__main__":
    main()
