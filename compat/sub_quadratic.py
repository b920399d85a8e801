"""ComfyUI's `comfy.ldm.modules.sub_quadratic_attention.efficient_dot_product_attention`: memory-
bounded attention by query and key chunks (Rabe & Staats 2021, arXiv 2112.05682), with
ComfyUI's tensor layout, over comfy_core.attention.kernels.sub_quadratic_attention.

ComfyUI's function takes `query [BH, Nq, d]`, the keys transposed `key_t [BH, d, Nk]` and
`value [BH, Nk, d]`, and an additive `mask` broadcastable to `[BH, Nq, Nk]`; the scores are
always computed in float32 here (`upcast_attention` is what ComfyUI's flag asks for), and
`use_checkpoint` (gradient checkpointing while training) has no effect at inference.
"""
from __future__ import annotations

import math

import torch


def efficient_dot_product_attention(query: torch.Tensor, key_t: torch.Tensor, value: torch.Tensor,
                                    query_chunk_size: int = 1024, kv_chunk_size: int | None = None,
                                    kv_chunk_size_min: int | None = None, use_checkpoint: bool = True,
                                    upcast_attention: bool = False, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Attention of `query` [BH, Nq, d] over `key_t` [BH, d, Nk] and `value` [BH, Nk, dv] ->
    [BH, Nq, dv]; keys in chunks of `kv_chunk_size` (default sqrt(Nk), at least
    `kv_chunk_size_min`, at most Nk)."""
    from comfy_core.attention.kernels import sub_quadratic_attention

    nk = key_t.shape[-1]
    if kv_chunk_size is None:
        kv_chunk_size = int(math.sqrt(nk))
        if kv_chunk_size_min is not None:
            kv_chunk_size = max(kv_chunk_size, kv_chunk_size_min)
    kv_chunk_size = max(1, min(kv_chunk_size, nk))
    if mask is not None and mask.dim() == 2:
        mask = mask.unsqueeze(0)  # [Nq, Nk] for every batch-head
    out = sub_quadratic_attention(query.unsqueeze(0), key_t.transpose(-1, -2).unsqueeze(0), value.unsqueeze(0),
                                  None if mask is None else mask.unsqueeze(0),
                                  query_chunk_size=query_chunk_size, kv_chunk_size=kv_chunk_size)
    return out.squeeze(0)
