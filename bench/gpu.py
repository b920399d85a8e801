"""Benchmark on a CUDA device: sampling speed, load time and peak VRAM for SD1.5 and SDXL.

Writes full-size random checkpoints with the real key layout (SD1.5 ~2.1 GB, SDXL ~6.9 GB, fp16)
to a temp folder, then for each model and each UNet dtype (fp16, bf16): the load time
(`load_checkpoint`, and the first move to the GPU), it/s of euler sampling at cfg 7 (SD1.5 at
512x512, SDXL at 1024x1024; batch 1 and 4; cond and uncond in one batch as always), and the peak
VRAM (`torch.cuda.max_memory_allocated`) of each run; then the same models under a `lowvram`
memory manager whose budget holds half of the UNet (partial load, the rest streamed per forward
from pinned memory), and under `novram`. Prints one line per figure and, with `--json FILE`,
writes them there. Never asserts a time. Without CUDA it says "no CUDA device" and exits 0.

Usage: `python bench/gpu.py [--steps 4] [--models sd15,sdxl] [--keep DIR] [--json FILE]`.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODELS = {"sd15": 512, "sdxl": 1024}


def _random_fp16(shapes: dict, device: str) -> dict:
    import torch

    gen = torch.Generator(device=device).manual_seed(0)
    out = {}
    for name, shape in shapes.items():
        if name.endswith("weight") and len(shape) == 1:
            t = torch.ones(shape, dtype=torch.float16, device=device)
        else:
            fan_in = math.prod(shape[1:]) if len(shape) > 1 else 1
            scale = 1.0 / math.sqrt(fan_in) if len(shape) > 1 else 0.02
            t = (torch.randn(shape, generator=gen, device=device) * scale).half()
        out[name] = t.cpu()
    return out


def write_sdxl_checkpoint(path: Path, device: str = "cuda") -> None:
    """A random fp16 SDXL base checkpoint with the real names and shapes (tensors drawn on the GPU)."""
    import torch
    from safetensors.torch import save_file

    from tests.fixtures.checkpoints import (_UNetArch, _VAEArch, hf_clip_shapes, open_clip_shapes, unet_shapes,
                                            vae_shapes)

    unet = _UNetArch(320, (1, 2, 4), 2, (0, 0, 2, 2, 10, 10), 10, (10, 10, 10, 2, 2, 2, 0, 0, 0),
                     context_dim=2048, linear_proj=True, adm_in_channels=2816)
    shapes = dict(unet_shapes(unet))
    shapes.update(vae_shapes(_VAEArch(ch=128, ch_mult=(1, 2, 4, 4), num_res_blocks=2)))
    shapes.update(hf_clip_shapes("conditioner.embedders.0.transformer.", 768, 12))
    shapes.update(open_clip_shapes("conditioner.embedders.1.model.", 1280, 32, 1280))
    tensors = _random_fp16(shapes, device)
    tensors["conditioner.embedders.0.transformer.text_model.embeddings.position_ids"] = torch.arange(77)[None]
    save_file(tensors, str(path))


def write_checkpoints(folder: Path, models: list[str]) -> dict[str, Path]:
    from bench.load import write_checkpoint

    paths = {}
    for name in models:
        path = folder / f"bench_{name}.safetensors"
        if not path.exists():
            started = time.perf_counter()
            write_checkpoint(path) if name == "sd15" else write_sdxl_checkpoint(path)
            print(f"wrote {path.name} ({path.stat().st_size / 2**30:.2f} GiB) in {time.perf_counter() - started:.1f} s",
                  flush=True)
        paths[name] = path
    return paths


def _sync() -> None:
    import torch

    torch.cuda.synchronize()


def run_model(name: str, path: Path, dtype_name: str, mode: str, batches: tuple[int, ...], steps: int,
              budget_fraction: float | None = None) -> list[dict]:
    import torch

    from comfy_core.checkpoint.dtype import DtypePolicy
    from comfy_core.loading import LoadOptions, load_checkpoint
    from comfy_core.memory import MemoryManager
    from comfy_core.sampling.ksampler import sample

    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype_name]
    torch.cuda.empty_cache()
    started = time.perf_counter()
    model, clip, _vae = load_checkpoint(path, LoadOptions(dtype_policy=DtypePolicy(device="cuda", unet=dtype)))
    load_s = time.perf_counter() - started
    budget = None
    if budget_fraction is not None:
        unet_bytes = sum(t.numel() * t.element_size() for t in model.model.parameters())
        budget = int(unet_bytes * budget_fraction)
    memory = MemoryManager(device="cuda", mode=mode, budget_bytes=budget, partial_floor=0)
    model = memory.track(model)
    memory.track(clip.patcher)
    cond, uncond = ([[c, {"pooled_output": p}]] for c, p in (
        clip.encode_from_tokens(clip.tokenize(text), return_pooled=True) for text in ("a photo of a cat", "")))
    side = MODELS[name] // 8
    figures = []
    first_move = None
    for batch in batches:
        latent = torch.zeros(batch, 4, side, side)
        noise = torch.randn(latent.shape, generator=torch.Generator().manual_seed(0))
        t0 = time.perf_counter()
        sample(model, noise, 1, 7.0, "euler", "normal", cond, uncond, latent, seed=0)  # warm-up (and first move)
        _sync()
        if first_move is None:
            first_move = time.perf_counter() - t0
        torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        sample(model, noise, steps, 7.0, "euler", "normal", cond, uncond, latent, seed=0)
        _sync()
        seconds = time.perf_counter() - t0
        plan = memory.plan_for(model)
        figures.append({
            "model": name, "size": MODELS[name], "dtype": dtype_name, "mode": mode, "batch": batch, "steps": steps,
            "it_per_s": steps / seconds, "load_s": load_s, "first_sample_s": first_move,
            "peak_vram_gib": torch.cuda.max_memory_allocated() / 2**30,
            "resident_gib": (plan.resident_bytes if plan else model.model_size()) / 2**30,
            "streamed_modules": len(plan.streamed) if plan else 0,
        })
        f = figures[-1]
        print(f"{name} {f['size']}px {dtype_name} {mode} batch {batch}: {f['it_per_s']:.2f} it/s, "
              f"peak VRAM {f['peak_vram_gib']:.2f} GiB, weights on GPU {f['resident_gib']:.2f} GiB "
              f"({f['streamed_modules']} modules streamed), load {load_s:.2f} s, first sample {first_move:.2f} s",
              flush=True)
    memory.free_all()
    del model, clip
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--models", default="sd15,sdxl")
    parser.add_argument("--keep", type=Path, default=None, help="write (or reuse) the checkpoints here")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure")
        return 0
    print(f"device: {torch.cuda.get_device_name()} (capability {torch.cuda.get_device_capability()}), "
          f"torch {torch.__version__}", flush=True)
    models = [m for m in args.models.split(",") if m]
    tmp = None if args.keep else tempfile.TemporaryDirectory(prefix="bench_gpu_")
    folder = args.keep or Path(tmp.name)
    folder.mkdir(parents=True, exist_ok=True)
    figures: list[dict] = []
    try:
        paths = write_checkpoints(folder, models)
        for name in models:
            for dtype_name in ("fp16", "bf16"):
                figures += run_model(name, paths[name], dtype_name, "highvram", (1, 4), args.steps)
            figures += run_model(name, paths[name], "fp16", "lowvram", (1,), args.steps, budget_fraction=0.5)
            figures += run_model(name, paths[name], "fp16", "novram", (1,), max(1, args.steps // 2), budget_fraction=0.0)
    finally:
        if args.json:
            args.json.write_text(json.dumps({"device": torch.cuda.get_device_name(), "figures": figures}, indent=1))
        if tmp is not None:
            tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
