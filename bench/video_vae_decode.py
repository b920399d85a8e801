"""A full-size LTX-Video VAE decode of 81 frames at the template's 768x512, MEASURED (random weights).

LTX-Video's causal video VAE is the cheapest video VAE at full size here (32x spatial, 8x temporal
compression, 128 latent channels): 81 frames at 768x512 are an 11 x 16 x 24 latent. The VAE is
built at LTX-Video 0.9.5's real block layout and widths (ComfyUI's third built-in layout: encoder
128 -> 2048 through space/time/all space-to-depth stages; decoder 1024 -> 128 through three
residual 2x2x2 depth-to-space upsamplers with 5 residual blocks at each width, timestep
conditioned), written as a random bf16 `.safetensors` file one tensor at a time, and loaded by
VAELoader's loader (`comfy_core.loading.load_vae`: layout read from the weights, float32 on the
CPU as ComfyUI's VAE dtype there).

Cases, each in a fresh process (`MALLOC_MMAP_THRESHOLD_=65536`, so freed blocks go back at once
and the peak measures live memory):

- `check`: a short clip (`--check-frames`, default 9 frames at 512x256): the VAEDecodeTiled node
  (`--check-tile` 256 px tiles, 64 px overlap as the LTX-2 template's: three tiles across) against
  the plain decode; prints max |d|, PSNR and max |d| by distance from the blend band, and the same
  node with one tile covering the clip (must be exact). The
  decoder mixes `DECODE_NOISE_SCALE` of Gaussian noise into each call's latent, so both decodes
  run with that noise off here (`noise_scale=0`): the difference is the tiling's alone.
- `tiled`: the whole decode through the VAEDecodeTiled node (`nodes.vae_ops.vae_decode_tiled`,
  the node's own unit conversions), its tile size the largest multiple of 32 pixels (temporal
  size the largest multiple of 8 frames) whose `VaePatcher.memory_used_decode` estimate fits
  `--budget-gib`, overlap 64 pixels / 8 frames as the LTX-2 template's VAEDecodeTiled. Printed:
  wall and CPU seconds, the peak RSS (VmHWM over the decode) and its growth over the loaded
  model, beside the estimate.
- `full`: the plain decode (VAEDecode: `VaePatcher.decode`, the whole clip through the decoder at
  once), run only when its estimate is under `--full-limit-gib` (default 12).

    OMP_NUM_THREADS=2 .venv/bin/python bench/video_vae_decode.py                 # check, tiled, full
    OMP_NUM_THREADS=2 .venv/bin/python bench/video_vae_decode.py --cases check --threads 2
    .venv/bin/python bench/video_vae_decode.py --frames 17 --width 384 --height 256   # a quick look
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
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GIB = 1 << 30


def ltxv095_config() -> Any:
    """LTX-Video 0.9.5's VAE layout at its real widths (our `LTXVVAEConfig` spelling: the
    decoder's blocks in the order they run)."""
    from comfy_core.models.ltxv_vae import LTXVVAEConfig

    encoder = (("res_x", 4), ("compress_space_res", 256), ("res_x", 6), ("compress_time_res", 512), ("res_x", 6),
               ("compress_all_res", 1024), ("res_x", 2), ("compress_all_res", 2048), ("res_x", 2))
    decoder = (("res_x", 5, False), ("compress_all", 512, True), ("res_x", 5, False),
               ("compress_all", 256, True), ("res_x", 5, False), ("compress_all", 128, True),
               ("res_x", 5, False))
    return LTXVVAEConfig(encoder_width=128, encoder_blocks=encoder, decoder_width=1024, decoder_blocks=decoder,
                         timestep_conditioning=True)


def write_vae(path: Path, seed: int = 0) -> int:
    """The VAE's tensors (names and shapes from the module built on the meta device), random,
    streamed to a bf16 safetensors file; returns its size."""
    import struct

    import torch

    from comfy_core.models.ltxv_vae import LTXVVAE

    with torch.device("meta"):
        module = LTXVVAE(ltxv095_config())
    shapes = {name: tuple(t.shape) for name, t in module.state_dict().items()}
    header, offset = {}, 0
    for name, shape in shapes.items():
        end = offset + math.prod(shape) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, end]}
        offset = end
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    gen = torch.Generator().manual_seed(seed)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for name, shape in shapes.items():
            values = torch.randn(shape, generator=gen)
            if name.endswith("timestep_scale_multiplier"):
                values = torch.tensor(1000.0)
            elif "per_channel_statistics" in name:
                values = 0.5 + torch.rand(shape, generator=gen) if "std" in name else 0.1 * values
            elif "scale_shift_table" in name or "per_channel_scale" in name:
                values = 0.1 * values
            elif len(shape) >= 2:  # fan-in scaled: activations stay O(1) through the decoder
                values = values / math.prod(shape[1:]) ** 0.5
            else:
                values = 0.05 * values
            f.write(values.to(torch.bfloat16).reshape(-1).contiguous().view(torch.uint8).numpy().tobytes())
    return path.stat().st_size


def _status() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmHWM", "VmRSS", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) * 1024
    return out


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def pick_tiling(vae: Any, latent_shape: tuple[int, ...], budget: int) -> tuple[int, int] | None:
    """VAEDecodeTiled's (tile_size px, temporal_size frames) with the largest tile volume whose
    decode estimate fits `budget` bytes: tile sizes multiples of 32 px, temporal sizes whole
    latent frames as frames (8k); None when not even a 64 px x 16-frame tile fits."""
    import torch

    f, ratio = vae.spacial_compression_decode(), vae.temporal_compression_decode()
    _, c, t, h, w = latent_shape
    best, best_volume = None, 0
    for tile in range(64, max(h, w) * f + 32, 32):
        for t_lat in range(2, t + 1):
            lh, lw = min(h, tile // f), min(w, tile // f)
            volume = lh * lw * t_lat
            if volume <= best_volume:
                continue
            if vae.memory_used_decode((1, c, t_lat, lh, lw), torch.float32) <= budget:
                best, best_volume = (tile, t_lat * ratio), volume
    return best


def case(name: str, path: str, frames: int, width: int, height: int, budget_gib: float, threads: int,
         check_frames: int, check_width: int, check_height: int, check_tile: int = 256) -> dict:
    """In this process: one case; the figures."""
    import torch

    sys.path.insert(0, str(ROOT))
    from comfy_core.loading import load_vae
    from comfy_core.models import ltxv_vae
    from comfy_core.models.wan_vae import latent_frames
    from comfy_core.models.vae_tiling import tile_spans
    from nodes.vae_ops import vae_decode_tiled

    torch.set_num_threads(threads)
    started = time.perf_counter()
    vae = load_vae(path)
    load_s = time.perf_counter() - started
    f, ratio = vae.spacial_compression_decode(), vae.temporal_compression_decode()
    gen = torch.Generator().manual_seed(0)
    if name == "check":
        latent = torch.randn(1, vae.latent_channels, latent_frames(check_frames, ratio=ratio), check_height // f,
                             check_width // f, generator=gen)
        tile, overlap = check_tile, 64
        original = ltxv_vae.LTXVVAE.decode_raw.__defaults__
        ltxv_vae.LTXVVAE.decode_raw.__defaults__ = (original[0], original[1], 0.0)  # noise off, see the doc
        try:
            plain = vae.decode(latent)[0]  # [T, H, W, 3]
            tiled = vae_decode_tiled({"samples": latent}, vae, tile_size=tile, overlap=overlap, temporal_size=4096,
                                     temporal_overlap=8)[0]
            whole = vae_decode_tiled({"samples": latent}, vae, tile_size=max(check_width, check_height),
                                     overlap=overlap, temporal_size=4096, temporal_overlap=8)[0]
        finally:
            ltxv_vae.LTXVVAE.decode_raw.__defaults__ = original
        diff = (tiled - plain).abs()
        mse = float((diff ** 2).mean())
        # Distance (pixels) of each column / row from the nearest blend band: where consecutive
        # tiles of the node's tiling (`tile_spans`, latent units) overlap.

        def distance(n: int) -> torch.Tensor:
            spans = tile_spans(n // f, tile // f, overlap // f)
            where = torch.arange(n, dtype=torch.float32)
            d = torch.full((n,), float(n))
            for (start, length), (following, _) in zip(spans, spans[1:]):
                lo, hi = following * f, (start + length) * f  # the band [lo, hi)
                inside = (where >= lo) & (where < hi)
                outside = torch.minimum((where - lo).abs(), (where - hi + 1).abs())
                d = torch.minimum(d, torch.where(inside, 0.0, outside))
            return d
        far = torch.minimum(distance(check_height)[:, None], distance(check_width)[None, :])  # [H, W]
        bands = {f"{lo}-{hi} px": float(diff[:, (far >= lo) & (far < hi)].max()) if ((far >= lo) & (far < hi)).any()
                 else None for lo, hi in ((0, 1), (1, 64), (64, 128), (128, 256), (256, 10 ** 6))}
        return {"case": name, "shape": list(plain.shape), "tile_px": tile, "overlap_px": overlap,
                "max_abs": float(diff.max()), "mean_abs": float(diff.mean()),
                "psnr_db": 10 * math.log10(1.0 / mse) if mse else float("inf"), "max_abs_by_distance": bands,
                "whole_tile_max_abs": float((whole - plain).abs().max()), "load_s": load_s}
    latent = torch.randn(1, vae.latent_channels, latent_frames(frames, ratio=ratio), height // f, width // f,
                         generator=gen)
    estimate_full = vae.memory_used_decode(tuple(latent.shape), torch.float32)
    result: dict[str, Any] = {"case": name, "latent": list(latent.shape), "load_s": load_s,
                              "estimate_full": estimate_full, "threads": torch.get_num_threads()}
    with torch.no_grad():
        vae.decode(torch.randn(1, vae.latent_channels, 2, 2, 2))  # warm-up: kernels, first-touch of weights
    if name == "tiled":
        tiling = pick_tiling(vae, tuple(latent.shape), int(budget_gib * GIB))
        if tiling is None:
            raise SystemExit(f"no tile fits {budget_gib} GiB")
        tile, temporal = tiling
        tile_shape = (1, latent.shape[1], min(latent.shape[2], temporal // ratio), min(latent.shape[3], tile // f),
                      min(latent.shape[4], tile // f))
        result.update(tile_px=tile, temporal_frames=temporal, estimate_tile=vae.memory_used_decode(tile_shape,
                                                                                                   torch.float32))

        def run() -> torch.Tensor:
            return vae_decode_tiled({"samples": latent}, vae, tile_size=tile, overlap=64, temporal_size=temporal,
                                    temporal_overlap=8)[0]
    else:
        def run() -> torch.Tensor:
            return vae.decode(latent)
    base = _status()
    _reset_peak()
    cpu, started = time.process_time(), time.perf_counter()
    out = run()
    result.update(seconds=time.perf_counter() - started, cpu_seconds=time.process_time() - cpu,
                  out_shape=list(out.shape), finite=bool(torch.isfinite(out).all()), before=base, end=_status())
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", default=["check", "tiled", "full"], choices=["check", "tiled", "full"])
    parser.add_argument("--frames", type=int, default=81, help="8k + 1 frames")
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--height", type=int, default=512)
    parser.add_argument("--budget-gib", type=float, default=4.0, help="decode working memory for the tiled case")
    parser.add_argument("--full-limit-gib", type=float, default=12.0, help="run `full` only under this estimate")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--check-frames", type=int, default=9)
    parser.add_argument("--check-width", type=int, default=512)
    parser.add_argument("--check-height", type=int, default=256)
    parser.add_argument("--check-tile", type=int, default=256, help="the check's VAEDecodeTiled tile_size (overlap 64)")
    parser.add_argument("--_case", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._case:
        print(json.dumps(case(**json.loads(args._case))))
        return
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; LTX-Video 0.9.5 VAE (real widths, "
          f"random weights), float32, {args.threads} thread(s); {args.frames} frames at {args.width}x{args.height}",
          flush=True)
    print(f"MemAvailable {_mem_available() / GIB:.1f} GiB", flush=True)
    with tempfile.TemporaryDirectory(prefix="video_vae_decode_", dir="/tmp") as folder:
        path = Path(folder) / "ltxv_0.9.5_vae.safetensors"
        sys.path.insert(0, str(ROOT))
        size = write_vae(path)
        print(f"wrote {path.name}: {size / GIB:.2f} GiB (bf16)", flush=True)
        for name in args.cases:
            spec = dict(name=name, path=str(path), frames=args.frames, width=args.width, height=args.height,
                        budget_gib=args.budget_gib, threads=args.threads, check_frames=args.check_frames,
                        check_width=args.check_width, check_height=args.check_height, check_tile=args.check_tile)
            if name == "full":
                estimate = _estimate_full(args)
                if estimate > args.full_limit_gib * GIB:
                    print(f"  full: skipped, estimate {estimate / GIB:.2f} GiB > {args.full_limit_gib} GiB", flush=True)
                    continue
                available = _mem_available()
                if estimate + 2 * size > available:  # the float32 model is 2x the bf16 file
                    print(f"  full: skipped, estimate {estimate / GIB:.2f} GiB + the model > MemAvailable "
                          f"{available / GIB:.2f} GiB", flush=True)
                    continue
            load = os.getloadavg()[0]
            done = subprocess.run([sys.executable, __file__, "--_case", json.dumps(spec)], capture_output=True,
                                  text=True, cwd=ROOT, env={**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"})
            if done.returncode != 0:
                print(f"  {name}: FAILED (exit {done.returncode}): {done.stderr.strip()[-2000:]}", flush=True)
                continue
            _report(json.loads(done.stdout.strip().splitlines()[-1]), load, os.getloadavg()[0])


def _mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def _estimate_full(args: argparse.Namespace) -> int:
    """The plain decode's estimate, without building the VAE: the formula of
    `LTXVVAE.working_bytes` for the decoder's last width (128) and patch 4, float32."""
    pixels, frames = args.width * args.height, args.frames
    return 8 * 128 * (frames * pixels // 16) * 4 + 3 * 4 * frames * pixels * 4


def _report(r: dict, load_before: float, load_after: float) -> None:
    loaded = f"load average {load_before:.1f} -> {load_after:.1f}"
    if r["case"] == "check":
        print(f"  check ({loaded}): {r['shape']} frames, tiles {r['tile_px']} px overlapping {r['overlap_px']} px vs "
              f"the plain decode: max |d| {r['max_abs']:.4f}, mean {r['mean_abs']:.4f}, PSNR {r['psnr_db']:.1f} dB; "
              f"max |d| by "
              f"distance from a blend band {r['max_abs_by_distance']}; one tile covering the clip: max |d| "
              f"{r['whole_tile_max_abs']:.2e}", flush=True)
        return
    b, e = r["before"], r["end"]
    what = (f"VAEDecodeTiled tile {r['tile_px']} px / temporal {r['temporal_frames']} frames (estimate "
            f"{r['estimate_tile'] / GIB:.2f} GiB a tile)" if r["case"] == "tiled"
            else f"VAEDecode, whole clip (estimate {r['estimate_full'] / GIB:.2f} GiB)")
    print(f"  {r['case']} ({loaded}; {r['threads']} threads): {what}: latent {r['latent']} -> {r['out_shape']}, "
          f"finite {r['finite']}", flush=True)
    print(f"    {r['seconds']:.0f} s wall, {r['cpu_seconds']:.0f} s CPU; peak RSS {e['VmHWM'] / GIB:.2f} GiB "
          f"(+{(e['VmHWM'] - b['VmRSS']) / GIB:.2f} GiB over the loaded model's {b['VmRSS'] / GIB:.2f} GiB)",
          flush=True)


if __name__ == "__main__":
    main()
