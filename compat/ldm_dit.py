"""DiT helpers of ComfyUI's `comfy/ldm/flux/math.py` for node packs, on our RoPE and attention.

- `rope(pos, dim, theta)`: rotation matrices `[B, L, dim/2, 2, 2]` for positions `[B, L]`
  (`comfy_core.attention.rope.rope_frequencies`).
- `attention(q, k, v, pe, mask=None, transformer_options={})`: q/k/v `[B, H, L, D]`, rotated by
  `pe` when given, attended by the UNet's replaceable `optimized_attention` (read through
  `comfy_core.models.transformer`'s global at every call, so a pack's replacement or a
  `optimized_attention_override` applies here too) -> `[B, L, H*D]`.
"""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.attention.rope import rope_frequencies, rotate_pairs
from comfy_core.models import transformer


def rope(pos: torch.Tensor, dim: int, theta: float) -> torch.Tensor:
    """ComfyUI's `rope`: float32 frequencies on `pos`' device."""
    return rope_frequencies(pos, dim, theta)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pe: torch.Tensor | None,
              mask: torch.Tensor | None = None, transformer_options: dict[str, Any] | None = None) -> torch.Tensor:
    """ComfyUI's flux `attention`: `[B, H, L, D]` in, `[B, L, H*D]` out."""
    if pe is not None:
        # Rotated in pe's dtype (float32), then back to v's, as ComfyUI's flux attention.
        q, k = rotate_pairs(q, pe, v.dtype, fused=False), rotate_pairs(k, pe, v.dtype, fused=False)
    heads = q.shape[1]
    return transformer.optimized_attention(q, k, v, heads, skip_reshape=True, mask=mask,
                                           transformer_options={} if transformer_options is None else transformer_options)
