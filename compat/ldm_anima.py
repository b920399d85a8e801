"""The rotary-embedding helpers of ComfyUI's `comfy.ldm.anima.model` and `comfy.ldm.cosmos.predict2`
that packs import (ComfyUI-ppm's NegPiP re-implements Cosmos-Predict2's `compute_qkv` with them).

The networks are ours (comfy_core/families/anima: `AnimaDiT`, its `Attention`, the `LLMAdapter`);
these are ComfyUI's pure functions, written here from ComfyUI's maths (comfy/ldm/anima/model.py,
comfy/ldm/cosmos/predict2.py):

- `rotate_half(x)`: `(x1, x2) -> (-x2, x1)` over the last axis's halves;
- `apply_rotary_pos_emb(x, cos, sin, unsqueeze_dim=1)`: the LLM adapter's rotate-half RoPE,
  `x cos + rotate_half(x) sin` with cos / sin `[B, S, d]` unsqueezed at `unsqueeze_dim` (the
  heads axis of `x [B, H, S, d]`);
- `RotaryEmbedding(head_dim)`: `forward(x, position_ids [B, S])` -> `(cos, sin)` `[B, S, d]` in
  x's dtype, base 10000, the frequencies twice over (computed in float32), as the adapter uses;
- `cosmos_apply_rotary_pos_emb(t, freqs)` (ComfyUI's `predict2.apply_rotary_pos_emb`): the DiT's
  RoPE on `t [..., d]` pairing `t_i` with `t_{i+d/2}`, with ComfyUI's rotation tensor `freqs [...,
  d/2, 2, 2]`; our DiT hands its blocks `rope_emb` as the pair `(cos, sin)` `[S, d/2]`
  (comfy_core/families/anima/dit.py `rotate_split_half`), and a pack that passes the `rope_emb` it
  was given on to this function gets that rotation too.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

ROPE_THETA = 10000.0


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """x `[..., d]` -> `cat(-x[..., d/2:], x[..., :d/2])`."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary_pos_emb(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int = 1) -> torch.Tensor:
    """x `[B, H, S, d]`, cos / sin `[B, S, d]` -> `x cos + rotate_half(x) sin` (broadcast over heads)."""
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return x * cos + rotate_half(x) * sin


class RotaryEmbedding(nn.Module):
    """The LLM adapter's rotary table (see the module docstring); `inv_freq` `[d/2]` is a
    non-persistent buffer, as in ComfyUI (no weights in a file)."""

    def __init__(self, head_dim: int) -> None:
        super().__init__()
        self.rope_theta = ROPE_THETA
        inv_freq = 1.0 / (ROPE_THETA ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    @torch.no_grad()
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x: only its dtype and device count; position_ids `[B, S]` -> cos, sin `[B, S, d]`."""
        angles = position_ids.to(device=x.device, dtype=torch.float32)[..., None] * self.inv_freq.to(x.device).float()
        angles = torch.cat((angles, angles), dim=-1)  # [B, S, d]
        return angles.cos().to(x.dtype), angles.sin().to(x.dtype)


def cosmos_apply_rotary_pos_emb(t: torch.Tensor, freqs: Any) -> torch.Tensor:
    """t `[..., d]` rotated in the pairs `(t_i, t_{i+d/2})` (see the module docstring): `freqs` is
    ComfyUI's rotation tensor `[..., d/2, 2, 2]` (row r of pair i: `out_r = f[i, r, 0] t_i + f[i, r, 1]
    t_{i+d/2}`), or our DiT's `(cos, sin)` pair `[S, d/2]` for `t [B, S, H, d]`; computed in float32,
    returned in t's dtype."""
    if isinstance(freqs, (tuple, list)):
        from comfy_core.families.anima.dit import rotate_split_half

        return rotate_split_half(t, tuple(freqs))
    pairs = t.reshape(*t.shape[:-1], 2, -1).movedim(-2, -1).unsqueeze(-2).float()  # [..., d/2, 1, 2]
    out = freqs[..., 0] * pairs[..., 0] + freqs[..., 1] * pairs[..., 1]  # [..., d/2, 2]
    return out.movedim(-1, -2).reshape(*t.shape).type_as(t)


__all__ = ["RotaryEmbedding", "apply_rotary_pos_emb", "cosmos_apply_rotary_pos_emb", "rotate_half"]
