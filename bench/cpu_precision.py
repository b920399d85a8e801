"""Benchmark: the CPU bf16 opt-in (`--bf16-unet`, `DtypePolicy.from_flags(bf16_unet=True)`) against
fp32, in speed and in quality, on one random full-size SD1.5 UNet and VAE.

Prints (never asserts):

- what the CPU offers for bf16: torch's CPU capability (`torch.backends.cpu.get_cpu_capability()`)
  and the /proc/cpuinfo flags `avx512_bf16`, `amx_bf16`, `amx_tile`; without one of them oneDNN
  has no bf16 dot-product instruction and converts to fp32 around each matmul/convolution, so
  bf16 is expected to be slower than fp32, and the script says so;
- seconds per UNet forward (64x64 latent, batch 2, `DiffusionModel.apply_model`, the sampler's
  call) in fp32 and bf16, median of `--runs` after one warm-up;
- quality: the same seed and random conditioning sampled `--steps` steps (euler, normal, cfg
  `--cfg`) with the fp32 and the bf16 UNet on the same weights, compared in latent space and
  after VAE decode (fp32 VAE both times): max and mean absolute difference and PSNR in dB (peak:
  the fp32 latent's range; 1.0 for the decoded images in 0..1).

Random weights (bench/load.py's scheme: N(0, 1/fan_in) weights, unit norms) have no trained
structure, so PSNR here is a bound on bf16's numerical drift, not an image-quality score.
Usage: `.venv/bin/python bench/cpu_precision.py [--tiny] [--threads 2] [--runs 3] [--steps 8]`
(`--tiny`: the test suite's tiny SD1 checkpoint, seconds instead of minutes).
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "amx_tile")


def cpu_bf16_support() -> dict:
    """torch's CPU capability and the bf16-related /proc/cpuinfo flags (a pure read)."""
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    found = {flag: flag in flags for flag in NATIVE_BF16_FLAGS}
    # torch's own probes (cpuinfo), where this torch has them
    probes = {name: bool(getattr(torch.cpu, f"_is_{name}_supported", lambda: False)())
              for name in ("avx512_bf16", "amx_tile")}
    native = found["avx512_bf16"] or found["amx_bf16"] or probes["avx512_bf16"] or probes["amx_tile"]
    return {"capability": torch.backends.cpu.get_cpu_capability(), "flags": found, "torch": probes,
            "avx512f": "avx512f" in flags, "native_bf16": native}


def sd15_state_dict(tiny: bool, seed: int = 0) -> dict[str, torch.Tensor]:
    """fp32 random UNet, VAE and text-encoder tensors with SD1.5's names (full size unless `tiny`)."""
    from tests.fixtures.checkpoints import (_UNetArch, _VAEArch, hf_clip_shapes, schedule_buffers, tiny_state_dict,
                                            unet_shapes, vae_shapes)

    if tiny:
        return tiny_state_dict("sd1", seed=seed)
    depth_in = (1, 1, 1, 1, 1, 1, 0, 0)
    depth_out = (0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1)
    shapes = dict(unet_shapes(_UNetArch(320, (1, 2, 4, 4), 2, depth_in, 1, depth_out, 768, linear_proj=False)))
    shapes.update(vae_shapes(_VAEArch(ch=128, ch_mult=(1, 2, 4, 4), num_res_blocks=2)))
    shapes.update(hf_clip_shapes("cond_stage_model.transformer.", 768, 12))  # detection reads the text encoder's keys
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, shape in shapes.items():
        if name.endswith("weight") and len(shape) == 1:
            tensors[name] = torch.ones(shape)
        elif len(shape) > 1:
            tensors[name] = torch.randn(shape, generator=gen) / math.sqrt(math.prod(shape[1:]))
        else:
            tensors[name] = torch.randn(shape, generator=gen) * 0.02
    tensors.update(schedule_buffers())
    tensors["cond_stage_model.transformer.text_model.embeddings.position_ids"] = torch.arange(77).unsqueeze(0)
    return tensors


def load(state: dict, unet_dtype: torch.dtype | None, vae: bool = False):
    """(model, vae) from `state` with the UNet in `unet_dtype` (None: the CPU default, fp32)."""
    from comfy_core import load_checkpoint
    from comfy_core.checkpoint.dtype import DtypePolicy
    from comfy_core.loading import LoadOptions

    policy = DtypePolicy.from_flags(bf16_unet=unet_dtype == torch.bfloat16)
    model, _, vae_patcher = load_checkpoint(dict(state), LoadOptions(dtype_policy=policy), output_clip=False,
                                            output_vae=vae)
    return model, vae_patcher


def context_width(model) -> int:
    return model.model._context_width() or 768


def forward_seconds(models: dict, latent: int, batch: int, runs: int) -> dict[str, float]:
    """name -> median seconds of `apply_model` (what the sampler calls) on a fixed input; the
    models take turns (alternating runs, so a neighbour's load falls on both), after one warm-up."""
    import contextlib

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 4, latent, latent, generator=gen)
    sigma = torch.full((batch,), 5.0)
    ctx = torch.randn(batch, 77, context_width(next(iter(models.values()))), generator=gen)
    times: dict[str, list[float]] = {name: [] for name in models}
    with torch.no_grad(), contextlib.ExitStack() as stack:
        applied = {name: stack.enter_context(m.applied()) for name, m in models.items()}
        for i in range(runs + 1):
            for name, diffusion in applied.items():
                t = time.perf_counter()
                diffusion.apply_model(x, sigma, c_crossattn=ctx)
                if i:  # the first round is a warm-up
                    times[name].append(time.perf_counter() - t)
    return {name: statistics.median(ts) for name, ts in times.items()}


def sample_latent(model, latent: int, steps: int, cfg: float, seed: int) -> torch.Tensor:
    from comfy_core.sampling.ksampler import sample

    gen = torch.Generator().manual_seed(1234)
    width = context_width(model)
    positive = [[torch.randn(1, 77, width, generator=gen), {}]]
    negative = [[torch.randn(1, 77, width, generator=gen), {}]]
    empty = torch.zeros(1, 4, latent, latent)
    noise = torch.randn(empty.shape, generator=torch.Generator().manual_seed(seed))
    return sample(model, noise, steps, cfg, "euler", "normal", positive, negative, empty, seed=seed)


def compare(ref: torch.Tensor, other: torch.Tensor, peak: float) -> str:
    diff = (other.float() - ref.float()).abs()
    mse = float((diff ** 2).mean())
    psnr = float("inf") if mse == 0 else 20 * math.log10(peak) - 10 * math.log10(mse)
    return f"max |d| {float(diff.max()):.4g}   mean |d| {float(diff.mean()):.4g}   PSNR {psnr:.1f} dB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="the tiny test checkpoint (quick run)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--cfg", type=float, default=7.0)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    logging_quiet()

    support = cpu_bf16_support()
    flags = ", ".join(f"{k}={'yes' if v else 'no'}" for k, v in support["flags"].items())
    probes = ", ".join(f"{k}={'yes' if v else 'no'}" for k, v in support["torch"].items())
    print(f"CPU: torch capability {support['capability']}, /proc/cpuinfo avx512f={'yes' if support['avx512f'] else 'no'}, "
          f"{flags}; torch.cpu probes {probes}")
    if support["native_bf16"]:
        print("native bf16 dot products (AVX512-BF16/AMX): bf16 matmuls and convolutions run in hardware")
    else:
        print("no native bf16 (no AVX512-BF16, no AMX): oneDNN emulates bf16 by converting to fp32 around "
              "each matmul/convolution, so bf16 is expected to be SLOWER than fp32 here; it only saves memory")
        if not args.tiny:
            print("  (on a 2-core AVX2 machine one full-size bf16 forward took over 300 s against ~25 s in fp32: "
                  "the full run takes hours there; --runs 1 --steps 2 keeps it to tens of minutes)")

    latent = 8 if args.tiny else 64
    size = "tiny SD1" if args.tiny else "SD1.5 full size"
    t = time.perf_counter()
    state = sd15_state_dict(args.tiny)
    fp32, vae = load(state, None, vae=True)
    bf16, _ = load(state, torch.bfloat16)
    print(f"{size}: random weights built and loaded twice in {time.perf_counter() - t:.1f} s "
          f"(UNet {fp32.model_dtype()} / {bf16.model_dtype()}), {args.threads} threads")

    seconds = forward_seconds({"fp32": fp32, "bf16": bf16}, latent, 2, args.runs)
    s32, s16 = seconds["fp32"], seconds["bf16"]
    print(f"UNet forward {latent}x{latent} latent, batch 2: fp32 {s32:.3f} s   bf16 {s16:.3f} s   "
          f"bf16/fp32 {s16 / s32:.2f}x ({'slower' if s16 > s32 else 'faster'})")

    t = time.perf_counter()
    ref = sample_latent(fp32, latent, args.steps, args.cfg, args.seed)
    t32 = time.perf_counter() - t
    t = time.perf_counter()
    low = sample_latent(bf16, latent, args.steps, args.cfg, args.seed)
    t16 = time.perf_counter() - t
    print(f"sampling euler {args.steps} steps cfg {args.cfg} seed {args.seed}: fp32 {t32:.1f} s   bf16 {t16:.1f} s")
    peak = float(ref.max() - ref.min())
    print(f"latent  bf16 vs fp32: {compare(ref, low, peak)}   (peak = fp32 latent range {peak:.3g})")
    with torch.no_grad():
        img32 = vae.decode(ref)
        img16 = vae.decode(low)
    print(f"decoded bf16 vs fp32: {compare(img32, img16, 1.0)}   (images in 0..1, "
          f"{tuple(img32.shape[1:3])}; {float((img32 - img16).abs().mul(255).max()):.1f} levels of 255 at most)")


def logging_quiet() -> None:
    import logging

    logging.basicConfig(level=logging.WARNING)


if __name__ == "__main__":
    main()
