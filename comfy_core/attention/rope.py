"""Rotary position embedding (RoPE, Su et al. 2021, "RoFormer") in the rotation-matrix layout of
ComfyUI's DiT code (`comfy/ldm/flux/math.py`, used by Flux, Wan, HunyuanVideo, Lumina...).

Frequencies are stored as one 2x2 rotation matrix per (position, frequency):
`freqs[..., L, D/2, 2, 2] = [[cos, -sin], [sin, cos]]` of `position * theta^(-2i/D)`. Applying
them treats the last axis of a `[..., L, D]` query/key as `D/2` consecutive pairs `(x0, x1)` and
multiplies each pair by its matrix: `(cos*x0 - sin*x1, sin*x0 + cos*x1)`. `freqs` broadcasts
against the tensor's leading axes (ComfyUI passes `[B, 1, L, D/2, 2, 2]` for `[B, H, L, D]`
tensors, or `[B, L, 1, D/2, 2, 2]` for Wan's `[B, L, H, D]`).
"""
from __future__ import annotations

import torch


def rope_frequencies(positions: torch.Tensor, dim: int, theta: float) -> torch.Tensor:
    """Rotation matrices for `positions` `[B, L]`: `[B, L, dim/2, 2, 2]`, float32.

    Frequency `i` is `theta^(-2i/dim)`; exponents, angles and their cos/sin are taken in float64
    (as ComfyUI's `rope`, so a large `theta` or position keeps its precision), then rounded."""
    if dim % 2:
        raise ValueError(f"RoPE needs an even dimension, got {dim}")
    exponent = torch.linspace(0, (dim - 2) / dim, steps=dim // 2, dtype=torch.float64, device=positions.device)
    omega = 1.0 / (theta ** exponent)  # [dim/2]
    angles = positions.to(torch.float32)[..., None].to(torch.float64) * omega  # [B, L, dim/2]
    cos, sin = torch.cos(angles), torch.sin(angles)
    rows = torch.stack([cos, -sin, sin, cos], dim=-1)  # [B, L, dim/2, 4]
    return rows.reshape(*rows.shape[:-1], 2, 2).to(torch.float32)


def rotate_pairs(x: torch.Tensor, freqs: torch.Tensor, out_dtype: torch.dtype, fused: bool = True) -> torch.Tensor:
    """`x` `[..., L, D]` rotated pairwise by `freqs` `[..., L, D/2, 2, 2]`, computed in `freqs`'
    dtype and returned in `out_dtype`.

    `fused` adds the second product with one multiply-add (`addcmul`, as ComfyUI's `apply_rope1`);
    without it, a product then a sum (as ComfyUI's flux `attention`): the two round differently
    in the last bit, and each caller matches its ComfyUI counterpart bit for bit."""
    pairs = x.to(dtype=freqs.dtype).reshape(*x.shape[:-1], -1, 1, 2)  # [..., L, D/2, 1, 2]
    # Row r of each matrix times the pair: out_r = m[r, 0] * x0 + m[r, 1] * x1.
    out = freqs[..., 0] * pairs[..., 0]  # [..., L, D/2, 2]
    if fused:
        out = torch.addcmul(out, freqs[..., 1], pairs[..., 1])
    else:
        out = out + freqs[..., 1] * pairs[..., 1]
    return out.reshape(*x.shape).to(out_dtype)


def apply_rope1(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """`x` rotated by `freqs` (ComfyUI's `apply_rope1`), in `x`'s dtype."""
    return rotate_pairs(x, freqs, x.dtype)


def apply_rope(xq: torch.Tensor, xk: torch.Tensor, freqs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Queries and keys rotated by the same frequencies (ComfyUI's `apply_rope(xq, xk, freqs_cis)`)."""
    return apply_rope1(xq, freqs), apply_rope1(xk, freqs)
