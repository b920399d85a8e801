"""Attention kernels: pure functions on head-split tensors.

Every kernel takes `q [B, H, Nq, d]`, `k [B, H, Nk, d]`, `v [B, H, Nk, dv]` and an optional
additive float mask broadcastable to `[B, H, Nq, Nk]` (already converted from a boolean mask by
the dispatcher) and returns `[B, H, Nq, dv]`. They compute the same function,
`softmax(q kᵀ / sqrt(d) + mask) v` (Vaswani et al. 2017, "Attention Is All You Need"), and
differ only in how much memory they touch at once.
"""
from __future__ import annotations

import math

import psutil
import torch
import torch.nn.functional as F


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    mask: torch.Tensor | None = None) -> torch.Tensor:
    """The reference: materialise the full `[B, H, Nq, Nk]` score matrix, softmax in fp32."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale  # [B, H, Nq, Nk]
    if mask is not None:
        scores = scores + mask.float()
    probs = scores.softmax(dim=-1)
    return torch.matmul(probs, v.float()).to(v.dtype)  # [B, H, Nq, dv]


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   mask: torch.Tensor | None = None) -> torch.Tensor:
    """PyTorch's fused `scaled_dot_product_attention` (flash / memory-efficient / math kernels)."""
    if mask is not None and mask.dtype != torch.bool:
        mask = mask.to(q.dtype)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def split_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    mask: torch.Tensor | None = None, *, slices: int | None = None,
                    memory_fraction: float = 0.5) -> torch.Tensor:
    """Attention sliced along the query axis so each slice's score matrix fits in free memory.

    The idea of ComfyUI's `attention_split` (comfy/ldm/modules/attention.py), written here: the
    full score matrix needs `B·H·Nq·Nk` floats; split the queries into the smallest power-of-two
    number of slices whose scores (with headroom for the softmax copy) fit in
    `memory_fraction` of the device's free memory. `slices` forces a count (tests, benchmarks).
    """
    nq = q.shape[2]
    if slices is None:
        slices = _slices_for_memory(q, k, memory_fraction)
    if slices < 1:
        raise ValueError(f"split attention: slices must be >= 1, got {slices}")
    step = max(1, math.ceil(nq / slices))
    out = torch.empty(q.shape[:-1] + (v.shape[-1],), dtype=v.dtype, device=v.device)  # [B, H, Nq, dv]
    for start in range(0, nq, step):
        end = min(nq, start + step)
        m = None if mask is None else _mask_block(mask, start, end, 0, k.shape[2])
        out[:, :, start:end] = naive_attention(q[:, :, start:end], k, v, m)
    return out


def _slices_for_memory(q: torch.Tensor, k: torch.Tensor, memory_fraction: float) -> int:
    b, h, nq, _ = q.shape
    nk = k.shape[2]
    # fp32 scores plus the softmax output: two score-sized buffers per slice.
    needed = b * h * nq * nk * 4 * 2
    free = _free_memory(q.device) * memory_fraction
    slices = 1
    while needed / slices > free and slices < nq:
        slices *= 2
    return min(slices, nq)


def _free_memory(device: torch.device) -> float:
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return float(free)
    return float(psutil.virtual_memory().available)


def sub_quadratic_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            mask: torch.Tensor | None = None, *, query_chunk_size: int = 1024,
                            kv_chunk_size: int | None = None) -> torch.Tensor:
    """Memory-bounded attention by query and key chunks with a running (online) softmax.

    Rabe & Staats (2021), "Self-attention Does Not Need O(n²) Memory" (arXiv:2112.05682): for each
    query chunk, visit the keys chunk by chunk, keeping a running row maximum, the running sum of
    exponentials and the running weighted value sum; rescale them whenever the maximum grows.
    Peak extra memory is `B·H·query_chunk·kv_chunk` scores, independent of the token count.
    (ComfyUI vendors Birch-san's implementation of the same paper; this one is written here.)
    `kv_chunk_size=None` uses `max(sqrt(Nk), 512)` keys per chunk, as that implementation does.
    """
    b, h, nq, d = q.shape
    nk = k.shape[2]
    if query_chunk_size < 1:
        raise ValueError(f"sub_quadratic attention: query_chunk_size must be >= 1, got {query_chunk_size}")
    if kv_chunk_size is None:
        kv_chunk_size = max(int(math.sqrt(nk)), 512)
    if kv_chunk_size < 1:
        raise ValueError(f"sub_quadratic attention: kv_chunk_size must be >= 1, got {kv_chunk_size}")
    scale = 1.0 / math.sqrt(d)
    out = torch.empty((b, h, nq, v.shape[-1]), dtype=v.dtype, device=v.device)  # [B, H, Nq, dv]
    for qs in range(0, nq, query_chunk_size):
        qe = min(nq, qs + query_chunk_size)
        qc = q[:, :, qs:qe].float() * scale  # [B, H, qc, d]
        if kv_chunk_size >= nk:
            # All keys fit one chunk (cross-attention on 77 tokens): a plain softmax is exact.
            scores = torch.matmul(qc, k.float().transpose(-1, -2))  # [B, H, qc, Nk]
            if mask is not None:
                scores.add_(_mask_block(mask, qs, qe, 0, nk).float())
            out[:, :, qs:qe] = torch.matmul(scores.softmax(dim=-1), v.float()).to(v.dtype)
            continue
        row_max = torch.full((b, h, qe - qs, 1), -math.inf, device=q.device)  # [B, H, qc, 1]
        row_sum = torch.zeros((b, h, qe - qs, 1), device=q.device)
        acc = torch.zeros((b, h, qe - qs, v.shape[-1]), device=q.device)  # [B, H, qc, dv]
        for ks in range(0, nk, kv_chunk_size):
            ke = min(nk, ks + kv_chunk_size)
            scores = torch.matmul(qc, k[:, :, ks:ke].float().transpose(-1, -2))  # [B, H, qc, kc]
            if mask is not None:
                scores.add_(_mask_block(mask, qs, qe, ks, ke).float())
            new_max = torch.maximum(row_max, scores.amax(dim=-1, keepdim=True))
            # A row whose every key so far is masked to -inf keeps max -inf; avoid inf - inf = nan.
            safe_max = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
            correction = torch.exp(row_max - safe_max)
            probs = scores.sub_(safe_max).exp_()  # in place: the chunk's only score-sized buffer
            row_sum.mul_(correction).add_(probs.sum(dim=-1, keepdim=True))
            acc.mul_(correction).add_(torch.matmul(probs, v[:, :, ks:ke].float()))
            row_max = new_max
        out[:, :, qs:qe] = (acc / row_sum).to(v.dtype)
    return out


def _mask_block(mask: torch.Tensor, qs: int, qe: int, ks: int, ke: int) -> torch.Tensor:
    """The block of a broadcastable `[.., Nq|1, Nk|1]` mask covering queries qs:qe, keys ks:ke."""
    m = mask if mask.shape[-2] == 1 else mask[..., qs:qe, :]
    return m if m.shape[-1] == 1 else m[..., ks:ke]
