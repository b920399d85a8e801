"""Attention dispatch. Every attention call in the UNet and VAE goes through `attention()`.

The default backend is `torch.nn.functional.scaled_dot_product_attention`. The backend in force
is read per call from a ContextVar (`use_backend()`, set by `Patcher.applied()` from the
patcher's `attention_backend` option), never from a global switch. `available_backends()` lists
what this machine can run.
"""
from __future__ import annotations

import torch

from comfy_core.attention.backends import (
    BACKENDS,
    DEFAULT_BACKEND,
    AttentionBackend,
    AttentionBackendError,
    AttentionBackendUnavailable,
    AttentionChoice,
    available_backends,
    backend_names,
    current_backend,
    get_backend,
    require_backend,
    unavailable_reason,
    use_backend,
)

__all__ = [
    "BACKENDS", "DEFAULT_BACKEND", "AttentionBackend", "AttentionBackendError",
    "AttentionBackendUnavailable", "AttentionChoice", "attention", "attention_heads",
    "available_backends", "backend_names", "current_backend", "get_backend", "require_backend",
    "unavailable_reason", "use_backend",
]


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int,
              mask: torch.Tensor | None = None) -> torch.Tensor:
    """Multi-head attention on `[B, N, heads*d]` tensors, returning `[B, Nq, heads*dv]`.

    `mask` follows `scaled_dot_product_attention`: boolean (True = attend) or additive float,
    broadcastable to `[B, heads, Nq, Nk]`.
    """
    b, nq, _ = q.shape
    # Every tensor is split by q's batch, the token count following (ComfyUI's `view(b, -1, heads,
    # d)`): where a pack tiles only q (HyperTile, ComfyUI-bleh's), k and v are spread over the
    # tiles the same way as on ComfyUI, rather than refused.
    q, k, v = (t.reshape(b, -1, heads, t.shape[2] // heads).transpose(1, 2)
               for t in (q, k, v))  # [B, H, N, d]
    out = attention_heads(q, k, v, mask)  # [B, H, Nq, dv]
    return out.transpose(1, 2).reshape(b, nq, -1)


def attention_heads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    mask: torch.Tensor | None = None) -> torch.Tensor:
    """Attention on head-split `[B, H, N, d]` tensors with the backend in force."""
    choice = current_backend()
    backend = BACKENDS[choice.name]
    if choice.name != DEFAULT_BACKEND:
        # Only xformers can be missing; its probe is memoised per device and dtype.
        require_backend(choice.name, q.device, q.dtype)
    if mask is not None and not backend.takes_bool_mask:
        mask = _additive(mask, q.dtype)
    return backend.kernel(q, k, v, mask, **dict(choice.options))


def _additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if mask.dtype == torch.bool:
        zeros = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
        return zeros.masked_fill(~mask, float("-inf"))
    return mask
