"""Block scales in cuBLAS's tiled ("swizzled") layout, as MXFP8 and NVFP4 files store them.

After comfy-kitchen's `to_blocked` / `from_blocked` (comfy_kitchen/float_utils.py), which follow
cuBLAS's 1D block-scaling factor layout (cuBLAS documentation, "1D Block Scaling Factors
Layout"): the scale matrix `[rows, cols]` (one scale per block of a weight row) is padded to
`[128 * ceil(rows / 128), 4 * ceil(cols / 4)]` and cut into 128 x 4 tiles; tile (rb, cb) is
stored as 512 consecutive values, in which the value of row `rb*128 + g*32 + r` (g < 4, r < 32)
and column `cb*4 + c` sits at `r * 16 + g * 4 + c`. Tiles are stored row of tiles by row of tiles.
"""
from __future__ import annotations

import torch


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def padded_scale_shape(rows: int, cols: int) -> tuple[int, int]:
    """The stored shape of the swizzled scales of a `[rows, cols]` scale matrix."""
    return 128 * ceil_div(rows, 128), 4 * ceil_div(cols, 4)


def swizzle(scales: torch.Tensor) -> torch.Tensor:
    """`[rows, cols]` scales -> the tiled layout, `padded_scale_shape(rows, cols)` (padding zeros)."""
    rows, cols = scales.shape
    prow, pcol = padded_scale_shape(rows, cols)
    padded = scales.new_zeros((prow, pcol))
    padded[:rows, :cols] = scales
    tiles = padded.reshape(prow // 128, 4, 32, pcol // 4, 4)  # [rb, g, r, cb, c]
    return tiles.permute(0, 3, 2, 1, 4).reshape(prow, pcol)   # [rb, cb, r, g, c]


def unswizzle(stored: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """The `[rows, cols]` scales from their tiled layout (stored at the padded shape, or flat)."""
    prow, pcol = padded_scale_shape(rows, cols)
    if stored.numel() != prow * pcol:
        raise ValueError(f"block scales of shape {list(stored.shape)} do not hold a tiled [{rows}, {cols}] "
                         f"scale matrix (needs {prow} x {pcol} values)")
    tiles = stored.reshape(prow // 128, pcol // 4, 32, 4, 4)  # [rb, cb, r, g, c]
    return tiles.permute(0, 3, 2, 1, 4).reshape(prow, pcol)[:rows, :cols]
