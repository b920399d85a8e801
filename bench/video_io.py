"""Seconds to write and read a Wan-sized clip with the video nodes' library (comfy_core.video):
81 frames of 832x480 (Wan 2.1's default) as H.264 MP4 with a stereo AAC track, as VP9 WEBM, and
decoded back to an IMAGE batch, with the file sizes.

    .venv/bin/python bench/video_io.py [--frames 81] [--width 832] [--height 480] [--fps 16]
                                       [--threads 1]

One run of each (a benchmark, never a test): the figures depend on the machine; `--threads` sets
torch's threads (the pixel conversion), FFmpeg's encoders and decoder choose their own.
"""
from __future__ import annotations

import argparse
import io
import math
import sys
import time
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=81)
    parser.add_argument("--width", type=int, default=832)
    parser.add_argument("--height", type=int, default=480)
    parser.add_argument("--fps", type=float, default=16.0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT))
    import torch

    from comfy_core.video import VideoComponents, VideoFromComponents, VideoFromFile
    from comfy_core.video.encode import write_webm

    torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(0)
    ramp = torch.linspace(0, 1, args.width)[None, None, :, None]
    images = (0.8 * ramp + 0.2 * torch.rand(args.frames, args.height, 1, 3, generator=generator)).clamp(0, 1)
    images = images.expand(args.frames, args.height, args.width, 3).contiguous()
    seconds = args.frames / args.fps
    t = torch.arange(int(seconds * 44100)) / 44100
    audio = {"waveform": (0.2 * torch.sin(2 * math.pi * 440 * t)).expand(1, 2, -1).contiguous(), "sample_rate": 44100}
    video = VideoFromComponents(VideoComponents(images=images, frame_rate=Fraction(args.fps), audio=audio))

    mp4 = io.BytesIO()
    start = time.perf_counter()
    video.save_to(mp4)
    encode_mp4 = time.perf_counter() - start
    webm = io.BytesIO()
    start = time.perf_counter()
    write_webm(webm, images, "vp9", args.fps, 32.0)
    encode_webm = time.perf_counter() - start
    start = time.perf_counter()
    decoded = VideoFromFile(io.BytesIO(mp4.getvalue())).get_components()
    decode_mp4 = time.perf_counter() - start
    error = (decoded.images - images).abs().mean().item()
    print(f"{args.frames} frames {args.width}x{args.height} @ {args.fps} fps, threads {args.threads}")
    print(f"  encode mp4 (h264 + aac): {encode_mp4:.2f} s, {len(mp4.getvalue()) / 1e6:.2f} MB")
    print(f"  encode webm (vp9 crf 32): {encode_webm:.2f} s, {len(webm.getvalue()) / 1e6:.2f} MB")
    print(f"  decode mp4 to IMAGE {list(decoded.images.shape)}: {decode_mp4:.2f} s, mean abs error {error:.4f}")


if __name__ == "__main__":
    main()
