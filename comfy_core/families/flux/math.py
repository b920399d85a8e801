"""The DiT helpers of Flux (Black Forest Labs' `flux/math.py`, as ComfyUI's `comfy/ldm/flux/math.py`
exposes them): `rope`, `apply_rope`/`apply_rope1` and `attention(q, k, v, pe, mask, transformer_options)`.

RoPE (Su et al. 2021, "RoFormer") in the rotation-matrix layout of `comfy_core.attention.rope`:
`pe` `[B, 1, L, D/2, 2, 2]` rotates consecutive pairs of each head's channels. `attention` takes
head-split `[B, H, L, D]` queries/keys/values, rotates q and k by `pe` (in `pe`'s dtype, float32,
then back to v's dtype; the product-then-sum form of ComfyUI's flux `attention`, so results match
it bit for bit) and attends through `comfy_core.attention.calling.attend`, looked up
at every call: by default the backend the model's patcher chose (sdpa), and a node pack that
replaces `comfy.ldm.modules.attention.optimized_attention` or sets
`transformer_options["optimized_attention_override"]` reaches Flux's attention too.
"""
from __future__ import annotations

from typing import Any

import torch

from comfy_core import extension_points
from comfy_core.attention import calling
from comfy_core.attention.rope import apply_rope, apply_rope1, rope_frequencies, rotate_pairs

__all__ = ["apply_rope", "apply_rope1", "attention", "rope", "run_attention"]


def rope(pos: torch.Tensor, dim: int, theta: float) -> torch.Tensor:
    """Rotation matrices for positions `pos` `[B, L]` on one axis of `dim` channels:
    `[B, L, dim/2, 2, 2]`, float32 (ComfyUI's flux `rope`)."""
    return rope_frequencies(pos, dim, theta)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pe: torch.Tensor | None,
              mask: torch.Tensor | None = None, transformer_options: dict[str, Any] | None = None) -> torch.Tensor:
    """Joint attention of Flux's blocks: q/k/v `[B, H, L, D]`, `pe` `[B, 1, L, D/2, 2, 2]` or None,
    `mask` broadcastable to `[B, H, L, L]` -> `[B, L, H*D]`."""
    if pe is not None:
        q = rotate_pairs(q, pe, v.dtype, fused=False)  # [B, H, L, D]
        k = rotate_pairs(k, pe, v.dtype, fused=False)
    heads = q.shape[1]
    options = {} if transformer_options is None else transformer_options
    return calling.attend(q, k, v, heads, skip_reshape=True, mask=mask,
                          transformer_options=options)  # [B, L, H*D]


def run_attention(*args: Any, **kwargs: Any) -> torch.Tensor:
    """What Flux-style blocks call: `attention`, or the replacement the extension points in force
    name (`ExtensionPoints.flux_attention`: a pack assigning `comfy.ldm.flux.math.attention` or
    `comfy.ldm.flux.layers.attention`, through compat), looked up at every call."""
    override = extension_points.current().flux_attention
    return (attention if override is None else override)(*args, **kwargs)
