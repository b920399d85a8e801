"""Sizes for fitting images into a box, after ComfyUI's ImageScaleToMaxDimension and
ResizeAndPadImage (comfy_extras/nodes_images.py, 0.3.64), written here from their behaviour.
The resizing itself is `comfy_core.image.resize.upscale_samples`."""
from __future__ import annotations

import torch


def max_dimension_size(height: int, width: int, largest: int) -> tuple[int, int]:
    """`(width, height)` with the longer side `largest` and the other rounded to keep the aspect
    ratio (a square becomes largest x largest)."""
    if height > width:
        return round((width / height) * largest), largest
    if width > height:
        return largest, round((height / width) * largest)
    return largest, largest


def fit_inside(height: int, width: int, box_width: int, box_height: int) -> tuple[int, int]:
    """`(width, height)` of the image scaled by one factor to fit inside the box, each side
    truncated (so at most the box)."""
    scale = min(box_width / width, box_height / height)
    return int(width * scale), int(height * scale)


def pad_centered(planes: torch.Tensor, box_width: int, box_height: int, value: float) -> torch.Tensor:
    """`planes` [B, C, h, w] in the middle of a [B, C, box_height, box_width] canvas filled with
    `value`; the offsets are floor((box - size) / 2)."""
    batch, channels, height, width = planes.shape
    canvas = torch.full((batch, channels, box_height, box_width), value, dtype=planes.dtype, device=planes.device)
    top, left = (box_height - height) // 2, (box_width - width) // 2
    canvas[:, :, top:top + height, left:left + width] = planes
    return canvas
