"""Time and peak memory of a Wan VAE decode at full width (random weights), per output frame.

    .venv/bin/python bench/wan_vae.py [--version 2.1|2.2] [--frames 5] [--width 416] [--height 240]
                                      [--tiled] [--tile 256] [--tile-t 16] [--threads N] [--full]

The VAE is built at the real widths (Wan 2.1: base 96, 16 latent channels; Wan 2.2: 160 / 256,
48 channels) with random weights, written to a temporary `.safetensors` file and loaded through
`vae_module_from` (the path VAELoader takes), as float32 on the CPU (or CUDA when present). The
latent is that of `--frames` frames (4k + 1) at `--width` x `--height`. "plain" is
`VaePatcher.decode` (one latent frame at a time through the causal decoder), `--tiled` adds
`VaePatcher.decode_tiled` with VAEDecodeTiled's units (`--tile` pixels, a quarter of it as overlap;
`--tile-t` latent frames overlapping by one). `--full` is the issue's case: 81 frames at 832x480,
very slow on a small CPU (hours on 2 cores). Each case runs in a fresh subprocess (as
`bench/vae_tiled.py`, with `MALLOC_MMAP_THRESHOLD_` so freed blocks go back at once); the peak is
the growth of the peak resident set over the loaded model and the input (CPU) or of CUDA's
allocator high-water mark, printed beside `VaePatcher.memory_used_decode`'s estimate. The
process CPU time per frame is printed too: on a shared machine the wall time also counts the
time other processes held the cores.
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


def _case(mode: str, version: str, frames: int, width: int, height: int, tile: int, tile_t: int, threads: int,
          folder: str) -> dict:
    """Runs inside the subprocess: one decode mode; returns the figures."""
    import torch

    sys.path.insert(0, str(ROOT))
    from bench.peak import time_and_peak
    from comfy_core.models.wan_vae import latent_frames, pixel_frames
    from comfy_core.patching.vae import VaePatcher
    from comfy_core.patching.vae_build import vae_module_from

    if threads:
        torch.set_num_threads(threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    vae = VaePatcher(vae_module_from(Path(folder) / f"wan{version}_vae.safetensors"), load_device=device,
                     offload_device="cpu")
    f = vae.spacial_compression_decode()
    latent = torch.randn(1, vae.latent_channels, latent_frames(frames), height // f, width // f,
                         generator=torch.Generator().manual_seed(0))

    def run() -> torch.Tensor:
        if mode == "plain":
            return vae.decode(latent)
        return vae.decode_tiled(latent, tile_x=tile // f, tile_y=tile // f, overlap=tile // 4 // f, tile_t=tile_t,
                                overlap_t=1)

    with torch.no_grad():
        vae.decode(torch.randn(1, vae.latent_channels, 1, 2, 2))  # warm-up: moves the module, loads kernels
    cpu_before = time.process_time()
    result = time_and_peak(run, device, 1)
    result.update(frames_out=pixel_frames(latent.shape[2]), threads=torch.get_num_threads(),
                  cpu_seconds=time.process_time() - cpu_before,
                  estimate_bytes=vae.memory_used_decode(tuple(latent.shape), vae.vae_dtype))
    return result


def _write_random_vae(version: str, folder: Path) -> Path:
    """The full-width VAE with torch's default random initialisation, as a safetensors file."""
    import torch
    from safetensors.torch import save_file

    sys.path.insert(0, str(ROOT))
    from comfy_core.models.wan_vae import WanVAE
    from comfy_core.models.wan_vae_config import WAN21_VAE, WAN22_VAE

    torch.manual_seed(0)
    module = WanVAE(WAN21_VAE if version == "2.1" else WAN22_VAE)
    path = folder / f"wan{version}_vae.safetensors"
    save_file({k: v.contiguous() for k, v in module.state_dict().items()}, str(path))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", choices=("2.1", "2.2"), default="2.1")
    parser.add_argument("--frames", type=int, default=5, help="video frames (4k + 1)")
    parser.add_argument("--width", type=int, default=416)
    parser.add_argument("--height", type=int, default=240)
    parser.add_argument("--tiled", action="store_true", help="also time VAEDecodeTiled's tiled decode")
    parser.add_argument("--tile", type=int, default=256, help="VAEDecodeTiled's tile_size, pixels")
    parser.add_argument("--tile-t", type=int, default=16, help="temporal tile, latent frames")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--full", action="store_true", help="the issue's case: 81 frames at 832x480 (slow)")
    parser.add_argument("--_case", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._case:
        print(json.dumps(_case(**json.loads(args._case))))
        return
    if args.full:
        args.frames, args.width, args.height = 81, 832, 480

    with tempfile.TemporaryDirectory(prefix="wan_vae_bench_") as folder:
        path = _write_random_vae(args.version, Path(folder))
        print(f"Wan {args.version} VAE (full width, random weights, {path.stat().st_size / 2**20:.0f} MiB file): "
              f"decode of {args.frames} frames at {args.width}x{args.height}")
        for mode in ("plain", "tiled") if args.tiled else ("plain",):
            spec = dict(mode=mode, version=args.version, frames=args.frames, width=args.width, height=args.height,
                        tile=args.tile, tile_t=args.tile_t, threads=args.threads, folder=folder)
            env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
            done = subprocess.run([sys.executable, __file__, "--_case", json.dumps(spec)], capture_output=True,
                                  text=True, env=env)
            if done.returncode != 0:
                print(f"{mode:>6}: failed: {done.stderr.strip().splitlines()[-3:]}")
                continue
            r = json.loads(done.stdout.strip().splitlines()[-1])
            frames = r["frames_out"]
            print(f"{mode:>6}: {r['seconds']:8.1f} s for {frames} frames = {r['seconds'] / frames:6.2f} s/frame "
                  f"(process CPU {r['cpu_seconds'] / frames:.2f} s/frame)  peak +{r['peak_bytes'] / 2**20:7.0f} MiB  "
                  f"(estimate {r['estimate_bytes'] / 2**20:.0f} MiB; {r['device']}, {r['threads']} threads)")


if __name__ == "__main__":
    main()
