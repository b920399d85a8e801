"""Time and peak memory of a full versus a tiled VAE decode on a full-size SD VAE (random weights).

    .venv/bin/python bench/vae_tiled.py [--size 512] [--tile 256] [--overlap 64] [--repeat 1]

The AutoencoderKL is built at SD1.x/SDXL's real widths (ch 128, ch_mult 1-2-4-4, two res blocks)
with random weights; the latent is `size / 8` square. "full" is `VaePatcher.decode`, "tiled" is
`VaePatcher.decode_tiled` with VAEDecodeTiled's units (`--tile` and `--overlap` in pixels, divided
by 8; the overlap capped at a quarter of the tile). Each case runs in a fresh subprocess and its
peak memory is the growth of the process's peak resident set over the model and the input
(CPU), or `torch.cuda.max_memory_allocated` over what was allocated before (CUDA). On the CPU
the subprocess runs with `MALLOC_MMAP_THRESHOLD_=65536` so that glibc hands large freed blocks
back at once: without it the resident set keeps every block a tile ever used, and the peak
measures heap fragmentation (many tile shapes), not live memory. The tiled
decode averages three tilings, so it does about three times the work of the full one plus the
overlaps: it trades time for a peak that follows the tile, not the image.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _case(mode: str, size: int, tile: int, overlap: int, repeat: int) -> dict:
    """Runs inside the subprocess: one decode mode; prints a JSON line."""
    import torch

    sys.path.insert(0, str(ROOT))
    from comfy_core.models.vae import AutoencoderKL, VAEConfig
    from bench.peak import time_and_peak
    from comfy_core.patching.vae import VaePatcher

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    vae = VaePatcher(AutoencoderKL(VAEConfig()).eval(), load_device=device, offload_device="cpu")
    latent = torch.randn(1, 4, size // 8, size // 8)
    overlap = tile // 4 if tile < overlap * 4 else overlap  # VAEDecodeTiled's rule

    def run() -> torch.Tensor:
        if mode == "full":
            return vae.decode(latent)
        return vae.decode_tiled(latent, tile // 8, tile // 8, overlap // 8)

    with torch.no_grad():
        vae.decode(torch.randn(1, 4, 8, 8))  # warm-up: moves the module, loads kernels
    return time_and_peak(run, device, repeat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=512, help="image side in pixels (a multiple of 8)")
    parser.add_argument("--tile", type=int, default=256, help="VAEDecodeTiled's tile_size, pixels")
    parser.add_argument("--overlap", type=int, default=64, help="VAEDecodeTiled's overlap, pixels")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--_case", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._case:
        print(json.dumps(_case(**json.loads(args._case))))
        return

    print(f"SD VAE decode of a {args.size}x{args.size} image; tiles {args.tile} px, overlap {args.overlap} px")
    for mode in ("full", "tiled"):
        spec = {"mode": mode, "size": args.size, "tile": args.tile, "overlap": args.overlap, "repeat": args.repeat}
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
        done = subprocess.run([sys.executable, __file__, "--_case", json.dumps(spec)], capture_output=True, text=True,
                              env=env)
        if done.returncode != 0:
            print(f"{mode:>6}: failed: {done.stderr.strip().splitlines()[-1:]}")
            continue
        result = json.loads(done.stdout.strip().splitlines()[-1])
        mib = result["peak_bytes"] / 2**20
        print(f"{mode:>6}: {result['seconds']:8.2f} s  peak +{mib:8.1f} MiB  ({result['device']})")


if __name__ == "__main__":
    main()
