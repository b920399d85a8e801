"""Step caches against uncached sampling on four layouts, and a roofline line (prints figures;
never asserts on time).

    OMP_NUM_THREADS=1 .venv/bin/python bench/dit_cache.py                  # everything, reduced widths
    .venv/bin/python bench/dit_cache.py --layouts flux wan --no-roofline
    .venv/bin/python bench/dit_cache.py --layouts --roofline-size 256     # only the roofline, a cheaper step

Layouts (random weights, reduced widths; the sizes are printed): an SD1.5-layout UNet, an
SDXL-layout UNet (three levels, linear transformers, 2048-wide context, no ADM label input),
a Flux-layout DiT (double then single blocks, guidance embedding) and a Wan 2.1-layout video
DiT, each at its template's step count (SD1.5 20, SDXL 25, Flux 20, Wan 20) with KSampler's
path (euler / simple; cfg 7, 7, 1, 5). Each is sampled without a cache, with EasyCache and
LazyCache (ComfyUI's nodes, start 0.15, end 0.95) and, on the DiTs, with the first-block cache
(ApplyFBCacheOnModel, start 0, end 1). No VAE is built, so the difference is measured on the
sampled latent: max |d| and a PSNR with the reference latent's range as the peak. Speed-up is
in CPU time of this process (the machine is shared; the load average is printed beside).
`calls`: diffusion-network calls (EasyCache / LazyCache skip whole calls); `full`: calls that
ran every block (the first-block cache always calls the network and may skip all blocks but
the first).

Roofline: the fp32 matmul peak (a 2048^3 torch.mm in a loop) against the achieved GFLOP/s of
one SD1.5-layout step (320 channels, cond + uncond batch of 2) at `--roofline-size`, its FLOPs
counted with torch.utils.flop_counter.FlopCounterMode (convolutions and matmuls).

The weights are random, so outputs change from step to step more than a trained model's do:
the skip counts and differences show the mechanism and its cost, not the quality a trained
model keeps.
"""
from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from comfy_core.model_patches import first_block_cache  # noqa: E402
from comfy_core.models.diffusion import DiffusionModel  # noqa: E402
from comfy_core.models.latent_formats import sd15_latent_format  # noqa: E402
from comfy_core.models.model_sampling import ModelSampling  # noqa: E402
from comfy_core.models.unet import UNetConfig, UNetModel  # noqa: E402
from comfy_core.patching import ModelPatcher  # noqa: E402
from comfy_core.sampling.ksampler import sample  # noqa: E402
from comfy_core.sampling.noise import prepare_noise  # noqa: E402
from comfy_core.split.diffusion_model import load_diffusion_model  # noqa: E402
from comfy_core.wrappers import WrappersMP  # noqa: E402
from nodes.first_block_cache import apply_fbcache_on_model  # noqa: E402
from nodes.step_cache import easy_cache, lazy_cache  # noqa: E402
from tests.fixtures.flux_files import write_tiny_flux  # noqa: E402
from tests.fixtures.wan_files import write_tiny_wan  # noqa: E402


def load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def unet(config: UNetConfig, latent_format=None) -> ModelPatcher:
    torch.manual_seed(0)
    net = UNetModel(config)
    return ModelPatcher(DiffusionModel(net, ModelSampling(), latent_format or sd15_latent_format()).eval())


def layouts(args: argparse.Namespace, tmp: Path) -> dict:
    """name -> (model, description, latent, cond, uncond, steps, cfg, is_dit)."""
    g = torch.Generator().manual_seed(1)
    out = {}
    if "sd15" in args.layouts:
        model = unet(UNetConfig(model_channels=64))
        out["sd15"] = (model, "SD1.5 layout, 64 ch (real 320), 256x256", torch.zeros(1, 4, 32, 32),
                       [[torch.randn(1, 77, 768, generator=g), {}]], [[torch.randn(1, 77, 768, generator=g), {}]],
                       20, 7.0, False)
    if "sdxl" in args.layouts:
        from comfy_core.families.sdxl.latent_format import sdxl_latent_format

        config = UNetConfig(model_channels=64, channel_mult=(1, 2, 4), transformer_depth=(0, 0, 1, 1, 2, 2),
                            transformer_depth_output=(0, 0, 0, 1, 1, 1, 2, 2, 2), transformer_depth_middle=2,
                            context_dim=2048, use_linear_in_transformer=True, num_heads=-1, num_head_channels=64)
        out["sdxl"] = (unet(config, sdxl_latent_format()),
                       "SDXL layout, 64 ch (real 320), depths 1/2 (real 2/10), no ADM, 256x256",
                       torch.zeros(1, 4, 32, 32), [[torch.randn(1, 77, 2048, generator=g), {}]],
                       [[torch.randn(1, 77, 2048, generator=g), {}]], 25, 7.0, False)
    if "flux" in args.layouts:
        path = write_tiny_flux(tmp / "flux.safetensors", hidden=256, heads=4, depth=2, depth_single=4)
        cond = [[torch.randn(1, 16, 32, generator=g), {"pooled_output": torch.randn(1, 24, generator=g),
                                                       "guidance": 3.5}]]
        out["flux"] = (load_diffusion_model(path), "Flux layout, hidden 256 (real 3072), 2+4 blocks (real 19+38), "
                       "256x256 (256 image tokens)", torch.zeros(1, 16, 32, 32), cond, cond, 20, 1.0, True)
    if "wan" in args.layouts:
        path = write_tiny_wan(tmp / "wan.safetensors", "t2v", dim=256, ffn_dim=512, num_layers=4)
        out["wan"] = (load_diffusion_model(path), "Wan 2.1 t2v layout, dim 256 (real 1536), 4 blocks (real 30), "
                      "5 latent frames x 16x16 (320 tokens)", torch.zeros(1, 16, 5, 16, 16),
                      [[torch.randn(1, 16, 32, generator=g), {}]], [[torch.zeros(1, 16, 32), {}]], 20, 5.0, True)
    return out


class FullCalls(logging.Handler):
    """The first-block cache's end-of-run log record: (name, full calls, cached calls, steps)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.full: int | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if isinstance(record.args, tuple) and len(record.args) == 4:
            self.full = int(record.args[1])


def timed(model, latent, steps, cfg, cond, uncond) -> tuple[torch.Tensor, float, float, int, int | None]:
    """The latent, wall s, CPU s, network calls, and (first-block cache) calls that ran every block."""
    calls = [0]

    def count(executor, *args, **kwargs):
        calls[0] += 1
        return executor(*args, **kwargs)

    counting = model.clone()
    counting.add_wrapper_with_key(WrappersMP.DIFFUSION_MODEL, "bench_count", count)
    handler = FullCalls()
    fb_log = logging.getLogger(first_block_cache.__name__)
    fb_log.addHandler(handler)
    fb_log.setLevel(logging.INFO)
    noise = prepare_noise(latent, 0)
    try:
        with torch.inference_mode():
            t0, c0 = time.perf_counter(), time.process_time()
            out = sample(counting, noise, steps, cfg, "euler", "simple", cond, uncond, latent, seed=0)
            return out, time.perf_counter() - t0, time.process_time() - c0, calls[0], handler.full
    finally:
        fb_log.removeHandler(handler)


def psnr(out: torch.Tensor, ref: torch.Tensor) -> float:
    mse = float(((out - ref) ** 2).mean())
    peak = float(ref.max() - ref.min())
    return math.inf if mse == 0 else 10 * math.log10(peak * peak / mse)


def caches(args: argparse.Namespace, is_dit: bool) -> list:
    runs = [(f"EasyCache {t:g}", lambda m, t=t: easy_cache(m, t, 0.15, 0.95, False)[0]) for t in args.step_thresholds]
    runs += [(f"LazyCache {t:g}", lambda m, t=t: lazy_cache(m, t, 0.15, 0.95, False)[0]) for t in args.step_thresholds]
    if is_dit:
        runs += [(f"FBCache {t:g}", lambda m, t=t: apply_fbcache_on_model(m, "diffusion_model", t, 0.0, 1.0, -1)[0])
                 for t in args.fb_thresholds]
    return runs


def roofline(size: int) -> None:
    from torch.utils.flop_counter import FlopCounterMode

    # CPU time of this process, not wall time: on a shared machine other processes stretch the
    # wall clock, not the work done (with 1 thread, CPU time is the compute time)
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    torch.mm(a, b)
    t0, n = time.process_time(), 0
    while time.process_time() - t0 < 5.0:
        torch.mm(a, b)
        n += 1
    peak = 2 * 2048 ** 3 * n / (time.process_time() - t0) / 1e9
    torch.manual_seed(0)
    net = UNetModel(UNetConfig()).eval()
    x = torch.randn(2, 4, size // 8, size // 8)
    t = torch.tensor([500.0, 500.0])
    ctx = torch.randn(2, 77, 768)
    with torch.inference_mode():
        net(x, t, ctx)  # warm up
        with FlopCounterMode(display=False) as counter:
            net(x, t, ctx)
        flops = counter.get_total_flops()
        t0, c0 = time.perf_counter(), time.process_time()
        net(x, t, ctx)
        wall, seconds = time.perf_counter() - t0, time.process_time() - c0
    achieved = flops / seconds / 1e9
    print(f"roofline ({torch.get_num_threads()} threads, load {load()}): fp32 torch.mm 2048^3 peak {peak:.1f} GFLOP/s; "
          f"SD1.5-layout step (320 ch, batch 2, {size}x{size}) {flops / 1e12:.3f} TFLOP in {seconds:.2f} s CPU "
          f"({wall:.2f} s wall) = {achieved:.1f} GFLOP/s ({achieved / peak:.0%} of the matmul peak)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layouts", nargs="*", default=["sd15", "sdxl", "flux", "wan"],
                        help="none: only the roofline line")
    parser.add_argument("--step-thresholds", type=float, nargs="+", default=[0.2, 0.5],
                        help="EasyCache / LazyCache reuse_threshold")
    parser.add_argument("--fb-thresholds", type=float, nargs="+", default=[0.12, 0.3, 0.6],
                        help="first-block cache residual_diff_threshold")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--roofline-size", type=int, default=512)
    parser.add_argument("--no-roofline", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} cores, load {load()}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, (model, what, latent, cond, uncond, steps, cfg, is_dit) in layouts(args, Path(tmp)).items():
            print(f"{name}: {what}; {steps} steps, cfg {cfg}")
            timed(model, latent, 1, cfg, cond, uncond)  # warm up
            ref, wall, base_cpu, calls, _ = timed(model, latent, steps, cfg, cond, uncond)
            print(f"  {'run':16s} {'calls':>5s} {'full':>4s} {'wall s':>7s} {'cpu s':>7s} {'speed-up':>8s} "
                  f"{'latent max|d|':>13s} {'PSNR dB':>8s}  load")
            print(f"  {'no cache':16s} {calls:5d} {calls:4d} {wall:7.2f} {base_cpu:7.2f} {1.0:7.2f}x {0.0:13.4g} "
                  f"{'inf':>8s}  {load()}")
            for label, install in caches(args, is_dit):
                out, wall, cpu, calls, full = timed(install(model), latent, steps, cfg, cond, uncond)
                print(f"  {label:16s} {calls:5d} {calls if full is None else full:4d} {wall:7.2f} {cpu:7.2f} "
                      f"{base_cpu / cpu:7.2f}x {float((out - ref).abs().max()):13.4g} {psnr(out, ref):8.2f}  {load()}")
    if not args.no_roofline:
        roofline(args.roofline_size)


if __name__ == "__main__":
    main()
