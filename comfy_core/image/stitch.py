"""Putting two IMAGE batches side by side, ComfyUI's ImageStitch (comfy_extras/nodes_images.py,
0.3.64, itself from kijai's ComfyUI-KJNodes), written here from its behaviour.

Images are `[B, H, W, C]`. `stitch_size` gives the size image2 is resized to when the sizes are
to be matched (the caller resizes, with Lanczos as ComfyUI); `stitch` does the rest: batches,
padding, channels, the spacer and the concatenation.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

DIRECTIONS = ("right", "down", "left", "up")
SPACING_COLORS = {"white": 1.0, "black": 0.0, "red": (1.0, 0.0, 0.0), "green": (0.0, 1.0, 0.0),
                  "blue": (0.0, 0.0, 1.0)}


def _horizontal(direction: str) -> bool:
    return direction in ("left", "right")


def stitch_size(image1_hw: tuple[int, int], image2_hw: tuple[int, int], direction: str) -> tuple[int, int]:
    """`(width, height)` for image2 so it matches image1 along the seam: image1's height for
    left/right (width from image2's aspect ratio, truncated), image1's width for up/down."""
    (h1, w1), (h2, w2) = image1_hw, image2_hw
    aspect = w2 / h2
    if _horizontal(direction):
        return int(h1 * aspect), h1
    return w1, int(w1 / aspect)


def _extend_batch(images: torch.Tensor, batch: int) -> torch.Tensor:
    """The batch padded to `batch` items with copies of its last image."""
    if images.shape[0] >= batch:
        return images
    return torch.cat([images, images[-1:].repeat(batch - images.shape[0], 1, 1, 1)])


def _center_pad(images: torch.Tensor, size: int, axis: int, value: float) -> torch.Tensor:
    """Pad axis 1 (height) or 2 (width) to `size`, half before and the rest after (floor first)."""
    missing = size - images.shape[axis]
    if missing <= 0:
        return images
    before, after = missing // 2, missing - missing // 2
    # F.pad counts pairs from the last axis: (C, C, W, W, H, H).
    pads = (0, 0, before, after) if axis == 2 else (0, 0, 0, 0, before, after)
    return F.pad(images, pads, mode="constant", value=value)


def _extend_channels(images: torch.Tensor, channels: int) -> torch.Tensor:
    """Channels appended as ones (an opaque alpha for RGB next to RGBA)."""
    missing = channels - images.shape[-1]
    if missing <= 0:
        return images
    ones = torch.ones(*images.shape[:-1], missing, device=images.device, dtype=images.dtype)
    return torch.cat([images, ones], dim=-1)


def _spacer(batch: int, height: int, width: int, channels: int, color: float | tuple[float, ...],
            like: torch.Tensor) -> torch.Tensor:
    """A [batch, height, width, channels] block of `color`; a fourth channel is opaque (1)."""
    block = torch.zeros((batch, height, width, channels), device=like.device, dtype=like.dtype)
    if isinstance(color, tuple):
        for index, value in enumerate(color[:channels]):
            block[..., index] = value
    else:
        block[..., :min(3, channels)] = color
    if channels == 4:
        block[..., 3] = 1.0
    return block


def stitch(image1: torch.Tensor, image2: torch.Tensor, direction: str, pad_to_match: bool,
           spacing_width: int, spacing_color: str) -> torch.Tensor:
    """image2 placed right of / below / left of / above image1 (`direction`).

    The shorter batch is extended with copies of its last image. With `pad_to_match` (sizes not
    matched by resizing), the side across the seam is centre-padded to the larger image with the
    spacing colour's grey level (0 for red/green/blue). The image with fewer channels gets ones.
    A spacer of `spacing_width` (rounded up to even) pixels in `spacing_color` goes between.
    """
    color = SPACING_COLORS[spacing_color]
    batch = max(image1.shape[0], image2.shape[0])
    image1, image2 = _extend_batch(image1, batch), _extend_batch(image2, batch)
    horizontal = _horizontal(direction)
    if pad_to_match:
        value = 0.0 if isinstance(color, tuple) else color
        axis = 1 if horizontal else 2
        size = max(image1.shape[axis], image2.shape[axis])
        image1, image2 = _center_pad(image1, size, axis, value), _center_pad(image2, size, axis, value)
    channels = max(image1.shape[-1], image2.shape[-1])
    image1, image2 = _extend_channels(image1, channels), _extend_channels(image2, channels)
    parts = [image2, image1] if direction in ("left", "up") else [image1, image2]
    if spacing_width > 0:
        spacing_width += spacing_width % 2
        if horizontal:
            height, width = max(image1.shape[1], image2.shape[1]), spacing_width
        else:
            height, width = spacing_width, max(image1.shape[2], image2.shape[2])
        parts.insert(1, _spacer(batch, height, width, channels, color, image1))
    return torch.cat(parts, dim=2 if horizontal else 1)
