"""Sampling benchmarks (prints figures; never asserts on time).

    .venv/bin/python bench/sampling.py                 # all three figures
    .venv/bin/python bench/sampling.py --skip-full     # without the full-size SD1.5 UNet
    .venv/bin/python bench/sampling.py --full-steps 2 --threads 2

1. Sampler overhead per step: the whole KSampler path (conditioning batching, CFG, the sampler's
   arithmetic, callbacks) around a zero-cost denoiser, on a 512x512 latent (1x4x64x64), cfg 7.
2. KSampler steps per second on a generated tiny SD1 checkpoint (tests/fixtures/checkpoints.py).
3. Seconds per step of a full-size, randomly initialised SD1.5 UNet at 512x512, cfg 7 (batch 2
   through the UNet), fp32, on `--threads` CPU threads.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from comfy_core.patching import ModelPatcher  # noqa: E402
from comfy_core.sampling.ksampler import sample  # noqa: E402
from comfy_core.models.model_sampling import ModelSampling  # noqa: E402
from comfy_core.sampling.noise import prepare_noise  # noqa: E402

OVERHEAD_SAMPLERS = ("euler", "euler_ancestral", "heun", "dpmpp_2m", "dpmpp_2m_sde", "lms", "uni_pc")


class ZeroCostModel(nn.Module):
    """A DiffusionModel stand-in whose network costs nothing: denoised = 0.9 * x."""

    def __init__(self) -> None:
        super().__init__()
        self.model_sampling = ModelSampling()
        self.latent_format = SimpleNamespace(channels=4, scale_factor=0.18215, latent_rgb_factors=None)
        self.calls = 0

    def apply_model(self, x, sigma, c_crossattn, y=None, transformer_options=None):
        self.calls += 1
        return x * 0.9

    def encode_adm(self, **_):
        return None


def bench_overhead(steps: int) -> None:
    print(f"1. sampler overhead per step (zero-cost denoiser, 1x4x64x64 latent, cfg 7, {steps} steps, "
          f"{torch.get_num_threads()} threads)")
    cond = [[torch.zeros(1, 77, 768), {}]]
    latent = torch.zeros(1, 4, 64, 64)
    noise = prepare_noise(latent, 0)
    for name in OVERHEAD_SAMPLERS:
        base = ZeroCostModel()
        model = ModelPatcher(base)
        sample(model, noise, 2, 7.0, name, "karras", cond, cond, latent, seed=0)  # warm up
        base.calls = 0
        t0 = time.perf_counter()
        sample(model, noise, steps, 7.0, name, "karras", cond, cond, latent, seed=0)
        dt = time.perf_counter() - t0
        print(f"   {name:16s} {1000 * dt / steps:7.2f} ms/step  ({base.calls} model calls)")


def bench_tiny_checkpoint(steps: int, size: int) -> None:
    from comfy_core.loading import load_checkpoint
    from nodes.conditioning import clip_text_encode
    from tests.fixtures.checkpoints import write_tiny_checkpoint

    with tempfile.TemporaryDirectory() as tmp:
        path = write_tiny_checkpoint(Path(tmp) / "tiny_sd1.safetensors", "sd1")
        model, clip, _ = load_checkpoint(path, output_vae=False)
    positive = clip_text_encode("a photo of a cat", clip)[0]
    negative = clip_text_encode("", clip)[0]
    latent = torch.zeros(1, 4, size // 8, size // 8)
    noise = prepare_noise(latent, 0)
    sample(model, noise, 1, 7.0, "euler", "karras", positive, negative, latent)  # warm up
    t0 = time.perf_counter()
    sample(model, noise, steps, 7.0, "euler", "karras", positive, negative, latent)
    dt = time.perf_counter() - t0
    print(f"2. KSampler on a tiny SD1 checkpoint (euler, cfg 7, {size}x{size}, {torch.get_num_threads()} threads): "
          f"{steps / dt:.2f} steps/s "
          f"({1000 * dt / steps:.0f} ms/step)")


def bench_full_unet(steps: int) -> None:
    from comfy_core.models.diffusion import DiffusionModel
    from comfy_core.models.latent_formats import sd15_latent_format
    from comfy_core.models.unet import UNetConfig, UNetModel

    torch.manual_seed(0)
    t0 = time.perf_counter()
    unet = UNetModel(UNetConfig())  # SD1.5: 320 channels, (1, 2, 4, 4), context 768
    dm = DiffusionModel(unet, ModelSampling(), sd15_latent_format()).eval()
    n_params = sum(p.numel() for p in dm.parameters())
    build = time.perf_counter() - t0
    model = ModelPatcher(dm)
    cond = [[torch.randn(1, 77, 768), {}]]
    uncond = [[torch.randn(1, 77, 768), {}]]
    latent = torch.zeros(1, 4, 64, 64)
    noise = prepare_noise(latent, 0)
    times: list[float] = []
    last = [time.perf_counter()]

    def tick(i, x0, x, total):
        now = time.perf_counter()
        times.append(now - last[0])
        last[0] = now

    with torch.inference_mode():
        last[0] = time.perf_counter()
        sample(model, noise, steps, 7.0, "euler", "karras", cond, uncond, latent, callback=tick)
    per_step = sorted(times)[len(times) // 2]
    print(f"3. full-size random SD1.5 UNet ({n_params / 1e6:.0f} M params, built in {build:.1f}s), 512x512, cfg 7, "
          f"fp32, {torch.get_num_threads()} threads: {per_step:.2f} s/step (median of {len(times)}: "
          + ", ".join(f"{t:.2f}" for t in times) + ")")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--overhead-steps", type=int, default=30)
    parser.add_argument("--tiny-steps", type=int, default=5)
    parser.add_argument("--tiny-size", type=int, default=256, help="image size in pixels for figure 2")
    parser.add_argument("--full-steps", type=int, default=2)
    parser.add_argument("--skip-full", action="store_true")
    args = parser.parse_args()
    print(f"torch {torch.__version__}")
    # Overhead is small-tensor work: show it single-threaded too, where thread hand-offs on a
    # loaded machine cannot inflate it.
    torch.set_num_threads(1)
    bench_overhead(args.overhead_steps)
    torch.set_num_threads(args.threads)
    bench_overhead(args.overhead_steps)
    bench_tiny_checkpoint(args.tiny_steps, args.tiny_size)
    if not args.skip_full:
        bench_full_unet(args.full_steps)


if __name__ == "__main__":
    main()
