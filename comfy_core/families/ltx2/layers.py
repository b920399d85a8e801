"""The LTX-2 network's layers, shared by the DiT (`dit.py`) and the text connectors
(`connector.py`): LTX-Video 0.9's adaLN-single (with a chosen number of rows), caption
projection and tanh-GELU feed-forward (re-exported from `ltxv/dit.py`), and the attention with
q/k RMS norms, separate query / key RoPE and optional per-head output gates (ComfyUI's `comfy/ldm/lightricks/model.py` names; written here).
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from comfy_core.attention import calling
from comfy_core.families.ltx2.rope import RopeTable, apply_rope
from comfy_core.families.ltxv.dit import (AdaLayerNormSingle, CaptionProjection,  # noqa: F401 -- re-exported
                                          FeedForward, RMSNorm)


class Attention(nn.Module):
    """Attention with biased projections, q/k RMS norms over the full width (eps 1e-5), RoPE on
    q (`pe`) and k (`k_pe`, else `pe`), and optional per-head output gates."""

    def __init__(self, query_dim: int, context_dim: int | None, heads: int, dim_head: int, gated: bool,
                 ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        inner = heads * dim_head
        context_dim = query_dim if context_dim is None else context_dim
        self.heads, self.dim_head = heads, dim_head
        self.q_norm = RMSNorm(inner, 1e-5, factory)
        self.k_norm = RMSNorm(inner, 1e-5, factory)
        self.to_q = ops.Linear(query_dim, inner, **factory)
        self.to_k = ops.Linear(context_dim, inner, **factory)
        self.to_v = ops.Linear(context_dim, inner, **factory)
        self.to_gate_logits = ops.Linear(query_dim, heads, **factory) if gated else None
        self.to_out = nn.ModuleList([ops.Linear(inner, query_dim, **factory), nn.Dropout(0.0)])

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None, mask: torch.Tensor | None = None,
                pe: RopeTable | None = None, k_pe: RopeTable | None = None,
                transformer_options: dict[str, Any] | None = None) -> torch.Tensor:
        options = transformer_options or {}
        self_attention = context is None
        context = x if context is None else context
        v = self.to_v(context)
        if self_attention and options.get("stg_skip_self_attn", False):
            out = v  # STG's perturbed pass: the values pass through
        else:
            q = self.q_norm(self.to_q(x))
            k = self.k_norm(self.to_k(context))
            if pe is not None:
                q, k = apply_rope(q, pe), apply_rope(k, pe if k_pe is None else k_pe)
            if mask is None:
                out = calling.attend(q, k, v, self.heads, transformer_options=options)
            else:
                out = calling.attend_masked(q, k, v, self.heads, mask=mask, transformer_options=options)
        if self.to_gate_logits is not None:
            gates = 2.0 * torch.sigmoid(self.to_gate_logits(x))  # [B, N, heads]; zero logits -> identity
            out = (out.unflatten(-1, (self.heads, -1)) * gates.unsqueeze(-1)).flatten(-2)
        return self.to_out[0](out)
