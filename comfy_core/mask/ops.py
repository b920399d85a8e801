"""Edits of MASK batches [B, H, W].

Behaviour of ComfyUI's `comfy_extras/nodes_mask.py` (FeatherMask, GrowMask, MaskComposite,
ImageColorToMask), written here; where ComfyUI's arithmetic has a quirk that changes values, it
is kept and said so, so that a mask made here equals the one ComfyUI makes.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from comfy_core.image.composite import overlap


def _edge_ramp(length: int, count: int, from_far_side: bool, dtype: torch.dtype) -> torch.Tensor:
    """Per-cell factors [length] of one feathered side: ones, with `count` cells scaled by
    (t + 1) / count, t = 0 .. count-1, counted from the near side, or for the far side at index
    -t as ComfyUI's loop writes it: t = 0 lands on cell 0 (the near edge) and the far edge
    cell gets 2 / count, so the far ramp is one cell short of the near one."""
    factors = torch.ones(length, dtype=torch.float64)
    ramp = torch.arange(1, count + 1, dtype=torch.float64) / count
    cells = (-torch.arange(count)) % length if from_far_side else torch.arange(count)
    factors[cells] = ramp
    return factors.to(dtype)


def feather(mask: torch.Tensor, left: int, top: int, right: int, bottom: int) -> torch.Tensor:
    """`mask` [B, H, W] faded towards each side over that many pixels (at most the side's
    length): the pixel t (from 0) from an edge is multiplied by (t + 1) / n. The sides are
    applied left, right, top, bottom, as ComfyUI, so products round the same way."""
    height, width = mask.shape[-2], mask.shape[-1]
    left, right, top, bottom = min(left, width), min(right, width), min(top, height), min(bottom, height)
    out = mask * _edge_ramp(width, left, False, mask.dtype)
    out = out * _edge_ramp(width, right, True, mask.dtype)
    out = out * _edge_ramp(height, top, False, mask.dtype)[:, None]
    return out * _edge_ramp(height, bottom, True, mask.dtype)[:, None]


def _dilate_once(planes: torch.Tensor, tapered: bool) -> torch.Tensor:
    """One grey dilation step of [B, 1, H, W] by a 3 x 3 square, or with `tapered` by the
    3 x 3 cross (a plus sign); pixels outside the mask are ignored."""
    if not tapered:
        return F.max_pool2d(planes, 3, stride=1, padding=1)
    columns = F.max_pool2d(planes, (3, 1), stride=1, padding=(1, 0))
    rows = F.max_pool2d(planes, (1, 3), stride=1, padding=(0, 1))
    return torch.maximum(columns, rows)


def grow(mask: torch.Tensor, expand: int, tapered_corners: bool) -> torch.Tensor:
    """`mask` [B, H, W] grown (expand > 0, grey dilation) or shrunk (expand < 0, grey erosion)
    by |expand| pixels, one 3 x 3 step at a time; `tapered_corners` steps by the cross, so the
    corners grow diagonally slower (an L1 ball instead of a square). Equals SciPy's
    `grey_dilation` / `grey_erosion` with that footprint repeated, as ComfyUI computes it (with
    a 3 x 3 footprint SciPy's mirrored border never changes a result)."""
    planes = mask.unsqueeze(1)  # [B, 1, H, W]
    sign = 1.0 if expand >= 0 else -1.0
    planes = planes * sign  # erosion is the dilation of the negated mask
    for _ in range(abs(expand)):
        planes = _dilate_once(planes, tapered_corners)
    return (planes * sign).squeeze(1)


def _as_bool(t: torch.Tensor) -> torch.Tensor:
    # As ComfyUI: round half to even first, so exactly 0.5 counts as unset.
    return t.round().bool()


COMBINE: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "multiply": lambda d, s: d * s,
    "add": lambda d, s: d + s,
    "subtract": lambda d, s: d - s,
    "and": lambda d, s: torch.bitwise_and(_as_bool(d), _as_bool(s)).float(),
    "or": lambda d, s: torch.bitwise_or(_as_bool(d), _as_bool(s)).float(),
    "xor": lambda d, s: torch.bitwise_xor(_as_bool(d), _as_bool(s)).float(),
}


def combine(destination: torch.Tensor, source: torch.Tensor, x: int, y: int, operation: str) -> torch.Tensor:
    """`destination` [B, H, W] with `source` [1 or B, h, w] combined into the region at (x, y)
    by `operation`; then the whole result is clamped to 0..1 (also outside the region)."""
    out = destination.clone()
    col, src_col, width = overlap(x, source.shape[-1], destination.shape[-1])
    row, src_row, height = overlap(y, source.shape[-2], destination.shape[-2])
    if width > 0 and height > 0:
        region = (slice(None), slice(row, row + height), slice(col, col + width))
        part = source[:, src_row:src_row + height, src_col:src_col + width]
        out[region] = COMBINE[operation](out[region], part)
    return torch.clamp(out, 0.0, 1.0)


def color_to_mask(image: torch.Tensor, color: int) -> torch.Tensor:
    """1 where the pixel of `image` [B, H, W, >=3], as 8-bit RGB (clamped, x 255, rounded half
    to even), equals `color` (0xRRGGBB); 0 elsewhere. [B, H, W] float32."""
    levels = (torch.clamp(image, 0, 1.0) * 255.0).round().to(torch.int)
    packed = (torch.bitwise_left_shift(levels[..., 0], 16) + torch.bitwise_left_shift(levels[..., 1], 8)
              + levels[..., 2])
    return (packed == color).float()
