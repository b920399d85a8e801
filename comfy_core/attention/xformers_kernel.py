"""The optional xformers backend: a guarded, lazy import that also probes a real call.

`import xformers.ops` can succeed while its compiled kernels failed to load (it then only prints
a warning), and its kernels need CUDA and fp16/bf16 (see docs: dependencies.md §2). So
availability is decided by running one tiny attention call on the target device and dtype.
"""
from __future__ import annotations

import functools
import importlib
from typing import Any

import torch


def xformers_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       mask: torch.Tensor | None = None) -> torch.Tensor:
    """`xformers.ops.memory_efficient_attention` on `[B, H, N, d]` tensors (it wants `[B, N, H, d]`)."""
    ops = _import_ops()
    bias = None
    if mask is not None:
        # xformers wants a dense bias of the full [B, H, Nq, Nk] shape.
        bias = mask.to(q.dtype).expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    out = ops.memory_efficient_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                         attn_bias=bias)  # [B, Nq, H, dv]
    return out.transpose(1, 2)


def xformers_problem(device: torch.device, dtype: torch.dtype) -> str | None:
    """None when xformers runs on `device`/`dtype`, otherwise why not (for error messages)."""
    return _probe(device.type, str(dtype))


def _import_ops() -> Any:
    return importlib.import_module("xformers.ops")


@functools.lru_cache(maxsize=None)
def _probe(device_type: str, dtype_name: str) -> str | None:
    # Memoised per (device type, dtype): the answer cannot change while the process lives.
    try:
        _import_ops()
    except Exception as exc:  # ImportError, or a broken compiled extension raising anything
        return f"the xformers package cannot be imported ({type(exc).__name__}: {exc}); install the 'xformers' extra"
    dtype = getattr(torch, dtype_name.replace("torch.", ""))
    try:
        x = torch.zeros((1, 1, 8, 8), device=device_type, dtype=dtype)
        xformers_attention(x, x, x)
    except Exception as exc:
        return (f"xformers is installed but cannot run on {device_type}/{dtype_name} "
                f"({type(exc).__name__}: {exc}); its kernels need CUDA and fp16/bf16")
    return None
