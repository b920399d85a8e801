"""Wan 2.2 S2V's audio conditioning: the audio encoder's hidden states resampled to the video
clock and cut into the window one generation covers, as ComfyUI's `WanSoundImageToVideo` makes
`audio_embed` (`comfy_extras/nodes_wan.py`: `linear_interpolation`, `get_sample_indices`,
`get_audio_embed_bucket_fps`, `wan_sound_to_video`; from Wan-Video/Wan2.2 `wan/modules/s2v/
audio_utils.py`); read, written here.

The wav2vec2 states (50 per second) are interpolated linearly (corners aligned) to 30 per second,
then sampled at the video's 16 fps from the start: sample i takes state `round(i * 30 / 16)`
(NumPy's round, half to even), zeros past the end, over whole clips of `4 * latent_frames` frames
(enough clips to hold all the audio). The result `[1, layers, width, frames]` is cut at
`frame_offset` to one clip; an extension continues where the previous clip ended.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

AUDIO_FPS = 50      # wav2vec2: one state per 320 samples at 16 kHz
VIDEO_RATE = 30     # the clock the states are interpolated to
FPS = 16            # Wan S2V's frame rate


def linear_interpolation(features: torch.Tensor, input_fps: float, output_fps: float,
                         output_len: int | None = None) -> torch.Tensor:
    """`[N, T, D]` -> `[N, T', D]`, `T' = int(T / input_fps * output_fps)` unless given; linear,
    corners aligned."""
    if output_len is None:
        output_len = int(features.shape[1] / float(input_fps) * output_fps)
    out = F.interpolate(features.transpose(1, 2), size=output_len, mode="linear", align_corners=True)
    return out.transpose(1, 2)


def sample_indices(original_fps: float, total_frames: int, target_fps: float, num_sample: int) -> np.ndarray:
    """Indices of `num_sample` frames at `target_fps` from the start of `total_frames` frames at
    `original_fps` (rounded half to even, clipped to the last frame)."""
    duration = num_sample / target_fps
    if duration > total_frames / original_fps:
        raise ValueError(f"{num_sample} frames at {target_fps} fps need more than the {total_frames} frames given")
    times = np.linspace(0.0, duration, num_sample, endpoint=False)
    return np.clip(np.round(times * original_fps).astype(int), 0, total_frames - 1)


def audio_embed_buckets(features: torch.Tensor, batch_frames: int, fps: int = FPS,
                        video_rate: int = VIDEO_RATE) -> tuple[torch.Tensor, int]:
    """`[layers, T, D]` at `video_rate` -> (`[clips * batch_frames, layers, D]`, clips): the
    states sampled at `fps`, zeros after the audio ends."""
    layers, frames, width = features.shape
    clips = int(frames / (batch_frames * video_rate / fps)) + 1
    count = clips * batch_frames
    padding = math.ceil(count / fps * video_rate) - frames
    rows = []
    for index in sample_indices(video_rate, frames + padding, fps, count):
        rows.append(features[:, int(index)] if index < frames else features.new_zeros(layers, width))
    return torch.stack(rows), clips


def s2v_audio_embed(all_layers: Sequence[torch.Tensor], latent_frames: int,
                    frame_offset: int = 0) -> tuple[torch.Tensor | None, int]:
    """The `audio_embed` `[1, layers, D, 4 * latent_frames]` of one generation starting at video
    frame `frame_offset`, and the next offset; (None, frame_offset) when the audio has ended."""
    features = torch.cat(list(all_layers))                                    # [layers (x batch), T, D]
    features = linear_interpolation(features.float(), AUDIO_FPS, VIDEO_RATE)
    batch_frames = latent_frames * 4
    buckets, _ = audio_embed_buckets(features, batch_frames)                  # [F, layers, D]
    embed = buckets[None].permute(0, 2, 3, 1)[..., frame_offset:frame_offset + batch_frames]
    if embed.shape[3] == 0:
        return None, frame_offset
    return embed, frame_offset + batch_frames
