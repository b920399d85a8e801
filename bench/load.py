"""Benchmark: loading a full-size SD1.5 checkpoint, and one UNet forward.

Writes a random SD1.5-shaped fp16 checkpoint (real key names and shapes, ~2.13 GB) to a temp
folder, then measures, each in a fresh process (so peak RSS is that step's own):

- the floor, a plain safetensors read of the whole file into memory. `load_file` alone is not one:
  safetensors >= 0.4 returns lazy views of a memory map and reads nothing (peak RSS stays at the
  baseline), so the floors are `floor_read` = `load_file` + reading every page of every tensor
  (the bytes resident in the process, file-backed: what a zero-copy load delivers) and
  `floor_clone` = `load_file` + `clone()` of every tensor (the bytes in the process's own
  memory: what a copying load delivers);
- `comfy_core.load_checkpoint` with fp16 weights kept as stored (`load_fp16`: zero-copy views of
  the file map; `load_fp16_copy`: `mmap=False`, copied into process memory), and with the CPU
  default (`load_default`: UNet/VAE upcast to fp32, text encoder fp16);
- one UNet forward at a 64x64 latent, batch 2, fp32, 2 threads: ours and diffusers' (if
  installed) on the same weights.

Page-cache pages of the file are dropped with posix_fadvise(DONTNEED) before each load ("cold"
for this guest). Prints one line per figure; `cpu` is the step's user + system CPU time over all
its threads, steadier than wall time on a small shared machine (a load that burns less CPU for
the same wall time is ahead as soon as something else wants the cores). Usage:
`.venv/bin/python bench/load.py [--keep DIR] [--skip-forward] [--steps floor_read,load_fp16,...]`
(`--keep` reuses a checkpoint already written there).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOAD_STEPS = ("floor_read", "floor_clone", "load_fp16", "load_fp16_copy", "load_default")


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _peak_mb() -> float:
    """This process's own RSS high-water mark. (`ru_maxrss` would not do: Linux carries the
    forked parent's RSS over into a child's maximum across exec.)"""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _cpu_s() -> float:
    """User + system CPU seconds of this process so far, all threads."""
    times = os.times()
    return times.user + times.system


def _drop_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def write_checkpoint(path: Path) -> int:
    """A random fp16 SD1.5 checkpoint with the real names and shapes; returns its tensor bytes."""
    import torch
    from safetensors.torch import save_file

    sys.path.insert(0, str(ROOT))
    from tests.fixtures.checkpoints import _UNetArch, _VAEArch, hf_clip_shapes, schedule_buffers, unet_shapes, vae_shapes

    depth_in = (1, 1, 1, 1, 1, 1, 0, 0)
    depth_out = (0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1)
    shapes = {}
    shapes.update(unet_shapes(_UNetArch(320, (1, 2, 4, 4), 2, depth_in, 1, depth_out, 768, linear_proj=False)))
    shapes.update(vae_shapes(_VAEArch(ch=128, ch_mult=(1, 2, 4, 4), num_res_blocks=2)))
    shapes.update(hf_clip_shapes("cond_stage_model.transformer.", 768, 12))
    gen = torch.Generator().manual_seed(0)
    tensors = {}
    for name, shape in shapes.items():
        fan_in = math.prod(shape[1:]) if len(shape) > 1 else 1
        scale = 1.0 / math.sqrt(fan_in) if len(shape) > 1 else 0.02
        if name.endswith("weight") and len(shape) == 1:
            tensors[name] = torch.ones(shape, dtype=torch.float16)
        else:
            tensors[name] = (torch.randn(shape, generator=gen) * scale).half()
    for name, value in schedule_buffers().items():
        tensors[name] = value.half()
    tensors["cond_stage_model.transformer.text_model.embeddings.position_ids"] = torch.arange(77).unsqueeze(0)
    save_file(tensors, str(path))
    return sum(t.numel() * t.element_size() for t in tensors.values())


def child(step: str, path: Path) -> dict:
    """One measurement in this (fresh) process."""
    import torch

    torch.set_num_threads(2)
    if step in ("floor_read", "floor_clone"):
        from safetensors.torch import load_file

        base = _rss_mb()
        _drop_cache(path)
        cpu, t = _cpu_s(), time.perf_counter()
        state = load_file(str(path))
        if step == "floor_clone":
            state = {k: v.clone() for k, v in state.items()}
        else:  # one byte per 2 KiB reads every page in
            for v in state.values():
                if v.numel():
                    int(v.reshape(-1).view(torch.uint8)[::2048].max())
        seconds, cpu = time.perf_counter() - t, _cpu_s() - cpu
        nbytes = sum(v.numel() * v.element_size() for v in state.values())
        return {"seconds": seconds, "cpu": cpu, "peak_mb": _peak_mb(), "base_mb": base, "weights_mb": nbytes / 2**20}
    if step in ("load_fp16", "load_fp16_copy", "load_default"):
        sys.path.insert(0, str(ROOT))
        from comfy_core import load_checkpoint
        from comfy_core.checkpoint.dtype import DtypePolicy
        from comfy_core.loading import LoadOptions
        import comfy_core.text_encoders  # noqa: F401  (import cost is not load cost)
        import transformers.models.clip.modeling_clip  # noqa: F401

        fp16 = step in ("load_fp16", "load_fp16_copy")
        policy = DtypePolicy(unet=torch.float16, vae=torch.float16) if fp16 else DtypePolicy()
        options = LoadOptions(dtype_policy=policy, mmap=step != "load_fp16_copy")
        base = _rss_mb()
        _drop_cache(path)
        cpu, t = _cpu_s(), time.perf_counter()
        model, clip, vae = load_checkpoint(path, options)
        seconds, cpu = time.perf_counter() - t, _cpu_s() - cpu
        modules = [model.model, vae.model, clip.patcher.model]
        nbytes = sum(p.numel() * p.element_size() for m in modules for p in m.parameters())
        return {"seconds": seconds, "cpu": cpu, "peak_mb": _peak_mb(), "base_mb": base, "weights_mb": nbytes / 2**20}
    if step in ("forward_ours", "forward_diffusers"):
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(2, 4, 64, 64, generator=gen)
        t_in = torch.tensor([500.0, 500.0])
        ctx = torch.randn(2, 77, 768, generator=gen)
        if step == "forward_ours":
            sys.path.insert(0, str(ROOT))
            from comfy_core import load_checkpoint

            model, _, _ = load_checkpoint(path, output_clip=False, output_vae=False)
            unet = model.model.diffusion_model

            def run(a, b, c):
                return unet(a, b, c)
        else:
            try:
                from diffusers import UNet2DConditionModel
                from diffusers.loaders.single_file_utils import convert_ldm_unet_checkpoint
            except ImportError:
                return {"skipped": "diffusers not installed"}
            from safetensors.torch import load_file

            state = {k: v.float() for k, v in load_file(str(path)).items() if k.startswith("model.diffusion_model.")}
            config = dict(sample_size=64, block_out_channels=[320, 640, 1280, 1280], layers_per_block=2,
                          cross_attention_dim=768, attention_head_dim=8,
                          down_block_types=["CrossAttnDownBlock2D"] * 3 + ["DownBlock2D"],
                          up_block_types=["UpBlock2D"] + ["CrossAttnUpBlock2D"] * 3)
            converted = convert_ldm_unet_checkpoint(state, config)
            del state
            with torch.device("meta"):
                unet = UNet2DConditionModel(**config)
            unet.load_state_dict(converted, strict=True, assign=True)
            unet.eval()

            def run(a, b, c):
                return unet(a, b, encoder_hidden_states=c).sample
        with torch.inference_mode():
            run(x[:, :, :16, :16], t_in, ctx)  # warm-up (allocator, kernels)
            t = time.perf_counter()
            out = run(x, t_in, ctx)
            seconds = time.perf_counter() - t
        return {"seconds": seconds, "finite": bool(torch.isfinite(out).all())}
    raise SystemExit(f"unknown step {step}")


def run_child(step: str, path: Path) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", step, str(path)], capture_output=True, text=True,
                         cwd=ROOT)
    if out.returncode:
        raise SystemExit(f"{step} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", nargs=2, metavar=("STEP", "PATH"))
    parser.add_argument("--keep", type=Path, help="write the checkpoint here (or reuse it) and keep it")
    parser.add_argument("--skip-forward", action="store_true", help="only the load figures")
    parser.add_argument("--steps", default=",".join(LOAD_STEPS),
                        help=f"comma-separated load steps to run (default: all of {','.join(LOAD_STEPS)})")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], Path(args.child[1]))))
        return
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bench_load_"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "sd15_random_fp16.safetensors"
    try:
        if not path.exists():
            t = time.perf_counter()
            nbytes = write_checkpoint(path)
            print(f"wrote {path.name}: {os.path.getsize(path) / 1e9:.2f} GB ({nbytes / 1e9:.2f} GB tensors) "
                  f"in {time.perf_counter() - t:.1f}s")
        results = {}
        steps = [s for s in args.steps.split(",") if s]
        unknown = sorted(set(steps) - set(LOAD_STEPS))
        if unknown:
            raise SystemExit(f"unknown --steps {unknown}; choose from {list(LOAD_STEPS)}")
        for step in steps:
            r = results[step] = run_child(step, path)
            grown = r["peak_mb"] - r["base_mb"]
            print(f"{step:16s} {r['seconds']:6.2f} s (cpu {r['cpu']:5.2f} s)   peak RSS {r['peak_mb']:7.0f} MB (+{grown:.0f} over "
                  f"{r['base_mb']:.0f} MB baseline)   weights in memory {r['weights_mb']:.0f} MB   "
                  f"growth/weights {grown / r['weights_mb']:.2f}")
        for step in (s for s in steps if s.startswith("load_")):
            ratios = [f"{results[step]['seconds'] / results[floor]['seconds']:.2f}x {floor}"
                      for floor in ("floor_read", "floor_clone") if floor in results]
            print(f"{step}: {', '.join(ratios) or 'no floor measured'}")
        if args.skip_forward:
            return
        ours = run_child("forward_ours", path)
        print(f"UNet forward 64x64 latent, batch 2, fp32, 2 threads: ours {ours['seconds']:.2f} s (finite={ours['finite']})")
        theirs = run_child("forward_diffusers", path)
        if "skipped" in theirs:
            print(f"diffusers: {theirs['skipped']}")
        else:
            print(f"                                           diffusers {theirs['seconds']:.2f} s   "
                  f"ratio ours/diffusers {ours['seconds'] / theirs['seconds']:.2f}")
    finally:
        if not args.keep:
            path.unlink(missing_ok=True)
            folder.rmdir()


if __name__ == "__main__":
    main()
