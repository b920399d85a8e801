"""ComfyUI's `comfy_extras.nodes_sag` helpers (Self-Attention Guidance, Hong et al. 2023,
"Improving Sample Quality of Diffusion Models Using Self-Attention Guidance", arXiv 2210.00939)
over comfy_core/model_patches/sag.py, with ComfyUI's parameters: packs call or replace them
(TiledDiffusion assigns its own `create_blur_map`).
"""
from __future__ import annotations

import torch

from comfy_core.model_patches import sag as _core


def attention_basic_with_sim(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int,
                             mask: torch.Tensor | None = None,
                             attn_precision: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention on `[B, N, heads*d]` and its softmax map `[B*heads, Nq, Nk]`; `mask` [B, ...]
    (True: attend) hides keys. Scores are computed in float32 whatever `attn_precision` says."""
    if mask is None:
        return _core.attention_with_scores(q, k, v, heads)
    b, nq, width = q.shape
    d = width // heads
    qh, kh, vh = (t.reshape(b, t.shape[1], heads, d).transpose(1, 2) for t in (q, k, v))  # [B, H, N, d]
    scores = torch.matmul(qh.float(), kh.float().transpose(-1, -2)) * d ** -0.5  # [B, H, Nq, Nk]
    keep = mask.reshape(b, -1).bool()[:, None, None, :]
    scores = scores.masked_fill(~keep, -torch.finfo(scores.dtype).max)
    probs = scores.softmax(dim=-1)
    out = torch.matmul(probs, vh.float()).to(v.dtype)
    return out.transpose(1, 2).reshape(b, nq, -1), probs.reshape(b * heads, nq, -1)


def create_blur_map(x0: torch.Tensor, attn: torch.Tensor, sigma: float = 3.0, threshold: float = 1.0) -> torch.Tensor:
    """`x0 [B, C, H, W]` blurred where the attention map `attn [B*heads, N, N]` is strong."""
    return _core.blur_where_attended(x0, attn, sigma, threshold)


def gaussian_blur_2d(img: torch.Tensor, kernel_size: int, sigma: float) -> torch.Tensor:
    """Gaussian blur of `[B, C, H, W]` per channel, reflect-padded."""
    return _core.gaussian_blur_2d(img, kernel_size, sigma)
