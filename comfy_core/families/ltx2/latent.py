"""LTX-2's latent layout as the network sees it: the token positions of the video and audio
latents, the audio latent's patchify / unpatchify, and ComfyUI's packing of the nested
[video, audio] latent into one tensor for the samplers (`utils.pack_latents`: every part
flattened to `[B, 1, -1]` and concatenated, with the list of shapes to undo it).
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import torch

AUDIO_CHANNELS, AUDIO_BINS = 8, 16  # the audio VAE's latent: 8 channels x 16 mel bins
AUDIO_HOP, AUDIO_RATE, AUDIO_DOWNSAMPLE = 160, 16000, 4  # mel hop, mel sample rate, mel frames per latent


class LTXAVInputError(ValueError):
    """The inputs of an LTX-2 forward do not fit the network."""


def video_positions(frames: int, height: int, width: int, batch: int, scale_factors: Sequence[int],
                    causal: bool, device: Any) -> torch.Tensor:
    """`[B, 3, f*h*w, 2]` pixel [start, end) spans of every video token, in token order (time in
    pixel frames; `causal`: the first latent frame stands for one pixel frame)."""
    grid = torch.stack(torch.meshgrid(torch.arange(frames, device=device), torch.arange(height, device=device),
                                      torch.arange(width, device=device), indexing="ij")).reshape(3, -1)
    spans = torch.stack((grid, grid + 1), dim=-1).to(torch.float32)  # [3, N, 2]
    spans = spans * torch.tensor(list(scale_factors), dtype=torch.float32, device=device).view(3, 1, 1)
    if causal:
        spans[0] = (spans[0] + 1 - scale_factors[0]).clamp(min=0)
    return spans.unsqueeze(0).expand(batch, -1, -1, -1).clone()


def audio_positions(frames: int, batch: int, device: Any) -> torch.Tensor:
    """`[B, 1, frames, 2]` [start, end) of every audio latent frame in seconds (4 mel frames of a
    160-sample hop at 16 kHz per latent frame, the first one causal)."""
    index = torch.arange(frames, dtype=torch.float32, device=device)
    start = (index * AUDIO_DOWNSAMPLE + 1 - AUDIO_DOWNSAMPLE).clamp(min=0) * AUDIO_HOP / AUDIO_RATE
    end = ((index + 1) * AUDIO_DOWNSAMPLE + 1 - AUDIO_DOWNSAMPLE).clamp(min=0) * AUDIO_HOP / AUDIO_RATE
    return torch.stack((start, end), dim=-1)[None, None].expand(batch, 1, -1, -1)


def pack_latents(parts: Sequence[torch.Tensor]) -> tuple[torch.Tensor, list[list[int]]]:
    """ComfyUI's `utils.pack_latents`: tensors `[B, ...]` -> `[B, 1, sum of their sizes]` and their shapes."""
    shapes = [list(part.shape) for part in parts]
    return torch.cat([part.reshape(part.shape[0], 1, -1) for part in parts], dim=-1), shapes


def unpack_latents(packed: torch.Tensor, shapes: Sequence[Sequence[int]]) -> list[torch.Tensor]:
    """The inverse of `pack_latents` (`LTXAVInputError` when the sizes do not add up)."""
    sizes = [int(math.prod(shape[1:])) for shape in shapes]
    if packed.ndim != 3 or packed.shape[-1] != sum(sizes):
        raise LTXAVInputError(f"LTX-2: a packed latent {tuple(packed.shape)} does not hold the shapes {list(shapes)}")
    return [chunk.reshape(packed.shape[0], *shape[1:])
            for chunk, shape in zip(packed.split(sizes, dim=-1), shapes)]


def patchify_audio(ax: torch.Tensor) -> torch.Tensor:
    """`[B, C, T, F] -> [B, T, C*F]` (channel-major)."""
    return ax.permute(0, 2, 1, 3).flatten(2)


def unpatchify_audio(tokens: torch.Tensor, channels: int, bins: int) -> torch.Tensor:
    """`[B, T, C*F] -> [B, C, T, F]`."""
    return tokens.unflatten(2, (channels, bins)).permute(0, 2, 1, 3)
