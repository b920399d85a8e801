"""SwiGLU feed-forward (Shazeer 2020, "GLU Variants Improve Transformer"), the MLP of LLaMA-style
DiT blocks: `w2(silu(w1 x) * w3 x)`, no biases.

Constructor as ComfyUI's Lumina `FeedForward` (`comfy/ldm/lumina/model.py`): the hidden width is
`hidden_dim` (times `ffn_dim_multiplier` when given) rounded up to a multiple of `multiple_of`;
`operation_settings` is `{"operations": ..., "device": ..., "dtype": ...}` (layers from
`operations`, torch.nn's when absent). Parameter names `w1`, `w2`, `w3` match those checkpoints.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.models.unet_blocks import operations_or_default


def swiglu_hidden_width(hidden_dim: int, multiple_of: int, ffn_dim_multiplier: float | None) -> int:
    """`hidden_dim` scaled by `ffn_dim_multiplier` (truncated) and rounded up to `multiple_of`."""
    if ffn_dim_multiplier is not None:
        hidden_dim = int(ffn_dim_multiplier * hidden_dim)
    return multiple_of * -(-hidden_dim // multiple_of)


class SwiGLUFeedForward(nn.Module):
    """`[..., dim] -> [..., dim]` through a gated `[..., hidden]` SiLU projection."""

    def __init__(self, dim: int, hidden_dim: int, multiple_of: int, ffn_dim_multiplier: float | None,
                 operation_settings: dict[str, Any] | None = None) -> None:
        super().__init__()
        settings = operation_settings or {}
        ops = operations_or_default(settings.get("operations"))
        hidden = swiglu_hidden_width(hidden_dim, multiple_of, ffn_dim_multiplier)
        factory = {"device": settings.get("device"), "dtype": settings.get("dtype")}
        self.w1 = ops.Linear(dim, hidden, bias=False, **factory)  # gate input
        self.w2 = ops.Linear(hidden, dim, bias=False, **factory)  # output projection
        self.w3 = ops.Linear(dim, hidden, bias=False, **factory)  # value input

    def _forward_silu_gating(self, x1: torch.Tensor, x3: torch.Tensor) -> torch.Tensor:
        return F.silu(x1) * x3

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(self._forward_silu_gating(self.w1(x), self.w3(x)))
