"""Rotary position embedding (RoPE, Su et al. 2021, "RoFormer") in the rotation-matrix layout of
ComfyUI's DiT code (`comfy/ldm/flux/math.py`, used by Flux, Wan, HunyuanVideo, Lumina...).

Frequencies are stored as one 2x2 rotation matrix per (position, frequency):
`freqs[..., L, D/2, 2, 2] = [[cos, -sin], [sin, cos]]` of `position * theta^(-2i/D)`. Applying
them treats the last axis of a `[..., L, D]` query/key as `D/2` consecutive pairs `(x0, x1)` and
multiplies each pair by its matrix: `(cos*x0 - sin*x1, sin*x0 + cos*x1)`. `freqs` broadcasts
against the tensor's leading axes (ComfyUI passes `[B, 1, L, D/2, 2, 2]` for `[B, H, L, D]`
tensors, or `[B, L, 1, D/2, 2, 2]` for Wan's `[B, L, H, D]`).

ScaleROPE's positions (today's ComfyUI, comfy_extras/nodes_rope.py) live here too: the node puts
`scale_x/y/t`, `shift_x/y/t` under `transformer_options["rope_options"]` (`with_rope_options`), and a
network building its position ids reads them through `rope_axis_positions` (ComfyUI's rule, the same
for each axis of Wan's and Flux's ids).
"""
from __future__ import annotations

from typing import Any, Mapping

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


# -- ScaleROPE's position scaling ----------------------------------------------------------------

ROPE_OPTIONS = "rope_options"  # transformer_options key (ComfyUI's `set_model_rope_options`)
ROPE_AXES = ("x", "y", "t")  # column, row, frame: `scale_<axis>` / `shift_<axis>`


def with_rope_options(transformer_options: Mapping[str, Any] | None, **values: float) -> dict[str, Any]:
    """A new `transformer_options` whose `rope_options` are the old ones updated with `values`
    (`scale_x`, `shift_x`, `scale_y`, ...; as ComfyUI's `ModelPatcher.set_model_rope_options`, which
    keeps other keys a pack put there). Neither given mapping is changed."""
    options = dict(transformer_options or {})
    options[ROPE_OPTIONS] = {**(options.get(ROPE_OPTIONS) or {}), **values}
    return options


def rope_axis_positions(length: int, axis: str, rope_options: Mapping[str, Any] | None, *, start: float = 0.0,
                        steps: int | None = None, device: Any = None, dtype: Any = None) -> torch.Tensor:
    """Positions `[steps]` of one axis of a token grid: `steps` (default `length`) values evenly from
    `start` to `start + length - 1` (ComfyUI's `torch.linspace(start, start + (len - 1), steps)` of its
    Wan / Flux position ids). ScaleROPE's `rope_options` stretch the span about its first position,
    `length - 1 -> (length - 1) * scale_<axis>`, and move it by `shift_<axis>`: with `steps == length`
    token `i` sits at `start + shift + i * scale`. Without options (None) the span is unchanged."""
    if axis not in ROPE_AXES:
        raise ValueError(f"RoPE axis must be one of {ROPE_AXES}, got {axis!r}")
    span = float(length) if rope_options is not None else length
    if rope_options is not None:
        span = (span - 1.0) * float(rope_options.get(f"scale_{axis}", 1.0)) + 1.0
        start = start + float(rope_options.get(f"shift_{axis}", 0.0))
    return torch.linspace(start, start + (span - 1), steps=length if steps is None else steps, device=device,
                          dtype=dtype)
