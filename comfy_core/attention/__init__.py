"""Attention dispatch. Every attention call in the UNet and VAE goes through `attention()`.

The default backend is `torch.nn.functional.scaled_dot_product_attention`. Other backends and the
per-patcher selection (a ContextVar, never a global switch) live in this package.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int,
              mask: torch.Tensor | None = None) -> torch.Tensor:
    """Multi-head attention on `[B, N, heads*d]` tensors, returning `[B, N, heads*d]`."""
    b, n, inner = q.shape
    d = inner // heads
    q, k, v = (t.reshape(b, -1, heads, d).transpose(1, 2) for t in (q, k, v))  # [B, H, N, d]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return out.transpose(1, 2).reshape(b, n, inner)
