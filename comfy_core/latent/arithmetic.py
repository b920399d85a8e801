"""Arithmetic between LATENT samples, after ComfyUI's comfy_extras/nodes_latent.py (0.3.64):
fitting one latent to another's shape, normalised interpolation, concatenation and cuts along
x / y / t. Written here from ComfyUI's behaviour.

Samples are `[B, C, h, w]` (images) or `[B, C, t, h, w]` (video). ComfyUI names the axes from
the end: x is the last, y the one before it, t the third from the end, which on image latents is
the channel axis; kept, so workflows that rely on it give what they give in ComfyUI.
"""
from __future__ import annotations

import math

import torch

from comfy_core.image.resize import upscale_samples

# The axis each name means, counted from the end (ComfyUI's LatentConcat and LatentCut).
AXES_FROM_END = {"x": 1, "y": 2, "t": 3}


def repeat_to_batch(samples: torch.Tensor, batch: int) -> torch.Tensor:
    """`samples` cut or tiled along the batch axis to `batch` items (ComfyUI's
    `comfy.utils.repeat_to_batch_size`): [b, ...] -> [batch, ...]."""
    if samples.shape[0] > batch:
        return samples.narrow(0, 0, batch)
    if samples.shape[0] < batch:
        copies = math.ceil(batch / samples.shape[0])
        return samples.repeat((copies,) + (1,) * (samples.ndim - 1)).narrow(0, 0, batch)
    return samples


def resize_spatial(samples: torch.Tensor, width: int, height: int) -> torch.Tensor:
    """Bilinear resize of the last two axes to height x width after a centre crop to the target's
    aspect ratio (ComfyUI's `common_upscale(..., "bilinear", "center")`). A video latent
    [B, C, t, h, w] is resized frame by frame: [B, C, t, height, width]."""
    if samples.ndim == 4:
        return upscale_samples(samples, width, height, "bilinear", "center")
    batch, channels, frames = samples.shape[0], samples.shape[1], samples.shape[2]
    planes = samples.movedim(2, 1).reshape(batch * frames, channels, samples.shape[-2], samples.shape[-1])
    out = upscale_samples(planes, width, height, "bilinear", "center")  # [B*t, C, height, width]
    return out.reshape(batch, frames, channels, height, width).movedim(1, 2)


def fit_to(samples: torch.Tensor, target_shape: torch.Size, repeat_batch: bool = True) -> torch.Tensor:
    """`samples` made to fit `target_shape` as ComfyUI's `reshape_latent_to`: resized (bilinear,
    centre crop) when any non-batch size differs, then, with `repeat_batch`, cut or tiled to the
    target's batch. Channel or frame counts are not changed: the caller checks them."""
    if samples.shape[1:] != target_shape[1:]:
        samples = resize_spatial(samples, target_shape[-1], target_shape[-2])
    return repeat_to_batch(samples, target_shape[0]) if repeat_batch else samples


def interpolate(first: torch.Tensor, second: torch.Tensor, ratio: float) -> torch.Tensor:
    """ComfyUI's LatentInterpolate on same-shape samples: the per-pixel channel vectors' directions
    are blended linearly (`ratio` of `first`), renormalised, and given the linearly blended length.

    Zero vectors have no direction (0/0 becomes 0 through `nan_to_num`, as there). Norms are taken
    per batch item here; ComfyUI's unkept dimension divides item i by the norms of item 0 only
    for batch 1 correctly (other batches fail, or mix items when batch = channels).
    """
    norm1 = torch.linalg.vector_norm(first, dim=1, keepdim=True)  # [B, 1, ...]
    norm2 = torch.linalg.vector_norm(second, dim=1, keepdim=True)
    dir1 = torch.nan_to_num(first / norm1)
    dir2 = torch.nan_to_num(second / norm2)
    blended = dir1 * ratio + dir2 * (1.0 - ratio)
    direction = torch.nan_to_num(blended / torch.linalg.vector_norm(blended, dim=1, keepdim=True))
    return direction * (norm1 * ratio + norm2 * (1.0 - ratio))


def concat(first: torch.Tensor, second: torch.Tensor, dim: str) -> torch.Tensor:
    """`first` then `second` along axis "x", "y" or "t" ("-x", "-y", "-t": `second` first), after
    cutting or tiling `second` to `first`'s batch. The other axes must already agree."""
    second = repeat_to_batch(second, first.shape[0])
    parts = (second, first) if dim.startswith("-") else (first, second)
    return torch.cat(parts, dim=-AXES_FROM_END[dim.lstrip("-")])


def cut(samples: torch.Tensor, dim: str, index: int, amount: int) -> torch.Tensor:
    """`amount` entries along axis "x", "y" or "t" from `index` (negative: from the end), both
    clamped to the axis as ComfyUI's LatentCut: a start past the end takes the last entry, a
    negative start before the beginning starts at 0, and the cut never runs past the end."""
    axis = samples.ndim - AXES_FROM_END[dim]
    size = samples.shape[axis]
    if index >= 0:
        index = min(index, size - 1)
        amount = min(size - index, amount)
    else:
        index = max(index, -size)
        amount = min(-index, amount)
    return torch.narrow(samples, axis, index, amount)
