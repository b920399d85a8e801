"""LTX-2's rotary position embedding: fractional positions over a frequency grid, in LTX-2's two
layouts (interleaved pairs as LTX-Video 0.9, or "split" halves per head), with the grid optionally
computed in float64 and positions optionally taken at the middle of each token's [start, end) span.

After Lightricks' LTX-2 (github.com/Lightricks/LTX-2, `ltx_core` rope; ComfyUI's
`comfy/ldm/lightricks/model.py` `_precompute_freqs_cis` / `apply_rotary_emb`); written here:

- positions `[B, P, N]` (or `[B, P, N, 2]` start / end; the middle point when `middle`, else the
  start) are divided by `max_pos[p]` per axis, mapped to `2 * frac - 1`;
- frequencies `theta ** linspace(0, 1, dim // (2 P)) * pi / 2` (float64 then float32 when
  `double_precision`), the angle for axis p and frequency f is `freq_f * (2 frac_p - 1)`, laid out
  frequency-major (`[f0p0, f0p1, ..., f1p0, ...]`);
- interleaved: channel pairs `(2i, 2i+1)` rotate by angle i, the first `dim % (2 P)` channels are
  left as they are; split: per head, channel `j` of the first half pairs with channel `j` of the
  second half, the angles cut into `heads` equal runs (one per head), the first
  `dim // 2 - P * (dim // (2 P))` angles of the whole run being zero (unrotated).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class RopeTable:
    """cos / sin of the angles: interleaved `[B, N, dim]`; split `[B, N, heads, dim // (2 heads)]`."""

    cos: torch.Tensor
    sin: torch.Tensor
    split: bool


def frequency_grid(theta: float, axes: int, dim: int, double_precision: bool, device: torch.device | None) -> torch.Tensor:
    """`[dim // (2 axes)]` float32 frequencies `theta ** linspace(0, 1) * pi / 2`."""
    steps = dim // (2 * axes)
    if double_precision:
        grid = torch.pow(torch.tensor(theta, dtype=torch.float64),
                         torch.linspace(0.0, 1.0, steps, dtype=torch.float64)) * (math.pi / 2)
        return grid.to(device=device, dtype=torch.float32)
    grid = theta ** torch.linspace(0.0, 1.0, steps, dtype=torch.float32, device=device)
    return grid * (math.pi / 2)


def rope_table(positions: torch.Tensor, dim: int, theta: float, max_pos: tuple[float, ...] | list[float],
               split: bool, heads: int, double_precision: bool, middle: bool,
               out_dtype: torch.dtype) -> RopeTable:
    """The rotation table for `positions` `[B, P, N]` or `[B, P, N, 2]` (see the module doc)."""
    if positions.ndim == 4:
        positions = (positions[..., 0] + positions[..., 1]) / 2.0 if middle else positions[..., 0]
    axes = positions.shape[1]
    if axes != len(max_pos):
        raise ValueError(f"LTX-2 RoPE: {axes} position axes for max_pos {list(max_pos)}")
    positions = positions.to(torch.float32)
    fractional = torch.stack([positions[:, i] / max_pos[i] for i in range(axes)], dim=-1)  # [B, N, P]
    freqs = frequency_grid(theta, axes, dim, double_precision, positions.device)
    angles = (freqs * (fractional.unsqueeze(-1) * 2 - 1)).transpose(-1, -2).flatten(2)  # [B, N, P * F]
    cos, sin = angles.cos(), angles.sin()
    if split:
        pad = dim // 2 - angles.shape[-1]
        if pad:
            cos = torch.cat([torch.ones_like(cos[..., :pad]), cos], dim=-1)
            sin = torch.cat([torch.zeros_like(sin[..., :pad]), sin], dim=-1)
        b, n, half = cos.shape
        if half % heads:
            raise ValueError(f"LTX-2 RoPE: {half} split angles do not divide into {heads} heads")
        cos = cos.reshape(b, n, heads, half // heads)
        sin = sin.reshape(b, n, heads, half // heads)
    else:
        cos, sin = cos.repeat_interleave(2, dim=-1), sin.repeat_interleave(2, dim=-1)
        pad = dim % (2 * axes)
        if pad:
            cos = torch.cat([torch.ones_like(cos[..., :pad]), cos], dim=-1)
            sin = torch.cat([torch.zeros_like(sin[..., :pad]), sin], dim=-1)
    return RopeTable(cos.to(out_dtype), sin.to(out_dtype), split)


def apply_rope(x: torch.Tensor, table: RopeTable) -> torch.Tensor:
    """Rotate `x` `[B, N, heads * d]` by the table (computed in float32, returned in x's dtype)."""
    dtype = x.dtype
    cos, sin = table.cos.to(torch.float32), table.sin.to(torch.float32)
    if table.split:
        b, n, heads, half = cos.shape
        parts = x.reshape(b, n, heads, 2, half).to(torch.float32)
        first, second = parts[..., 0, :], parts[..., 1, :]
        out = torch.stack((first * cos - second * sin, second * cos + first * sin), dim=-2)
        return out.reshape(x.shape).to(dtype)
    pairs = x.to(torch.float32).unflatten(-1, (-1, 2))
    rotated = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
    return (x.to(torch.float32) * cos + rotated * sin).to(dtype)
