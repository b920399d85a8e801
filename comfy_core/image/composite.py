"""Pasting one image or latent onto another through a mask.

Behaviour of ComfyUI's `comfy_extras/nodes_mask.py: composite` (ImageCompositeMasked,
LatentCompositeMasked) and `node_helpers.image_alpha_fix`, written here from their description.
Unlike ComfyUI's helper, `paste` returns a new tensor and leaves `destination` untouched, and a
source placed partly above or left of the destination (negative x or y, which ComfyUI's nodes
never pass: their inputs have min 0) keeps its visible part instead of failing.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def repeat_to_batch(tensor: torch.Tensor, batch: int) -> torch.Tensor:
    """`tensor` [b, ...] cut or tiled along dim 0 to exactly `batch` items (ComfyUI's
    `repeat_to_batch_size`: the first `batch` items, or the whole batch repeated)."""
    if tensor.shape[0] > batch:
        return tensor[:batch]
    if tensor.shape[0] < batch:
        reps = math.ceil(batch / tensor.shape[0])
        return tensor.repeat((reps,) + (1,) * (tensor.ndim - 1))[:batch]
    return tensor


def match_alpha(destination: torch.Tensor, source: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """ComfyUI's channel reconciliation of two IMAGE batches [B, H, W, C] before compositing or
    blending: a source with more channels than the destination loses the extra ones (RGBA onto
    RGB drops alpha); a destination with fewer channels than the source gets one more channel,
    filled with 1 (opaque alpha). Returns new or unchanged tensors, never modified inputs."""
    if destination.shape[-1] < source.shape[-1]:
        return destination, source[..., :destination.shape[-1]]
    if destination.shape[-1] > source.shape[-1]:
        # As ComfyUI: the destination (not the source) grows by one opaque channel.
        opaque = torch.ones_like(destination[..., :1])
        return torch.cat((destination, opaque), dim=-1), source
    return destination, source


def overlap(offset: int, length: int, limit: int) -> tuple[int, int, int]:
    """Where a run of `length` cells placed at `offset` overlaps the cells 0..limit-1 of a
    target: (first target cell, first run cell, overlap length; <= 0 when they do not meet)."""
    start = max(offset, 0)
    stop = min(offset + length, limit)
    return start, start - offset, stop - start


def paste(destination: torch.Tensor, source: torch.Tensor, x: int, y: int, mask: torch.Tensor | None = None,
          multiplier: int = 8, resize_source: bool = False) -> torch.Tensor:
    """`destination` [B, C, H, W] with `source` [b, C, h, w] pasted at pixel (x, y).

    x and y are in pixels of the image the planes stand for and are divided (floored) by
    `multiplier`: 8 for SD latents, 1 for images. With `resize_source` the source is first
    resized (bilinear) to the destination's size. The source batch is tiled or cut to the
    destination's. `mask` ([b', h', w'] or [h', w'], 1 = source) is resized bilinearly to the
    source's size and tiled to its batch; without one the source replaces the region. Each
    covered pixel becomes `mask * source + (1 - mask) * destination`.
    """
    source = source.to(destination.device)
    if resize_source:
        source = F.interpolate(source, size=(destination.shape[-2], destination.shape[-1]), mode="bilinear")
    source = repeat_to_batch(source, destination.shape[0])  # [B, C, h, w]
    src_h, src_w = source.shape[-2], source.shape[-1]
    dst_h, dst_w = destination.shape[-2], destination.shape[-1]

    # Offsets beyond the far side (or a whole source before the near side) change nothing.
    x = max(-src_w * multiplier, min(x, dst_w * multiplier))
    y = max(-src_h * multiplier, min(y, dst_h * multiplier))
    left, top = x // multiplier, y // multiplier

    if mask is None:
        weight = torch.ones_like(source)  # [B, C, h, w]
    else:
        weight = mask.to(destination.device, copy=True).reshape(-1, 1, mask.shape[-2], mask.shape[-1])
        weight = F.interpolate(weight, size=(src_h, src_w), mode="bilinear")
        weight = repeat_to_batch(weight, source.shape[0])  # [B, 1, h, w]

    out = destination.clone()
    col, src_col, width = overlap(left, src_w, dst_w)
    row, src_row, height = overlap(top, src_h, dst_h)
    if width <= 0 or height <= 0:
        return out
    weight = weight[..., src_row:src_row + height, src_col:src_col + width]
    region = (slice(None), slice(None), slice(row, row + height), slice(col, col + width))
    out[region] = weight * source[..., src_row:src_row + height, src_col:src_col + width] \
        + (1.0 - weight) * destination[region]
    return out
