"""The free helpers of ComfyUI's `comfy/ldm/modules/diffusionmodules/mmdit.py` and
`comfy/ldm/common_dit.py` that our MMDiT (comfy_core/families/sd3/mmdit*.py) does not need itself, with
ComfyUI's signatures, for node packs that import them.

- `get_2d_sincos_pos_embed`, `get_2d_sincos_pos_embed_from_grid`,
  `get_1d_sincos_pos_embed_from_grid`: the MAE / DiT sin-cos position tables in numpy (He et al.
  2021, "Masked Autoencoders Are Scalable Vision Learners", `util/pos_embed.py`; the DiT code SAI's
  MMDiT carries): sin half then cos half per axis, height axis first (`grid[0]` is the width grid,
  as `np.meshgrid(w, h)` stacks it, so the first half of the channels encodes columns).
- `get_1d_sincos_pos_embed_from_grid_torch`: the same 1-D table in torch (our `sincos_1d`, with
  ComfyUI's `device` / `dtype` arguments).
- `gate_cat`: the MMDiT-X sum of the residual and two gated attention outputs.
- `SwiGLUFeedForward`: the MMDiT file's SwiGLU MLP, whose constructor takes the un-scaled width
  (`2/3` of it is used, rounded up to `multiple_of`), over our `comfy_core.models.swiglu` layer.
- `rms_norm(x, weight=None, eps=1e-6)`: common_dit's RMSNorm function.
- `default(x, y)`: `x` unless None.

torch and numpy are imported by the functions that use them (this module is a facade home).
"""
from __future__ import annotations

from typing import Any, Optional

from comfy_core.models.swiglu import SwiGLUFeedForward as _SwiGLU


def default(x: Any, y: Any) -> Any:
    """`x`, or `y` when `x` is None (ComfyUI's mmdit `default`)."""
    return x if x is not None else y


def get_1d_sincos_pos_embed_from_grid(embed_dim: int, pos: Any) -> Any:
    """numpy `[M, embed_dim]` table of positions `pos` (any shape, M values): sin then cos of
    `pos * 10000^(-2i/embed_dim)`, computed in float64 as the MAE code does."""
    import numpy as np

    if embed_dim % 2:
        raise ValueError(f"sin-cos position embedding: embed_dim must be even, got {embed_dim}")
    omega = 1.0 / 10000 ** (np.arange(embed_dim // 2, dtype=np.float64) / (embed_dim / 2.0))  # [D/2]
    angles = np.asarray(pos).reshape(-1)[:, None] * omega[None, :]  # [M, D/2]
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1)  # [M, D]


def get_2d_sincos_pos_embed_from_grid(embed_dim: int, grid: Any) -> Any:
    """numpy `[H*W, embed_dim]` from a `[2, 1, H, W]` grid: the first half of the channels encodes
    `grid[0]`, the second half `grid[1]`."""
    import numpy as np

    if embed_dim % 2:
        raise ValueError(f"sin-cos position embedding: embed_dim must be even, got {embed_dim}")
    first = get_1d_sincos_pos_embed_from_grid(embed_dim // 2, grid[0])  # [H*W, D/2]
    second = get_1d_sincos_pos_embed_from_grid(embed_dim // 2, grid[1])  # [H*W, D/2]
    return np.concatenate([first, second], axis=1)


def get_2d_sincos_pos_embed(embed_dim: int, grid_size: int, cls_token: bool = False, extra_tokens: int = 0,
                            scaling_factor: Optional[float] = None, offset: Optional[float] = None) -> Any:
    """numpy `[grid_size**2, embed_dim]` table of a square grid (plus `extra_tokens` zero rows in
    front when `cls_token`); positions divided by `scaling_factor` then shifted by `-offset`."""
    import numpy as np

    axis = np.arange(grid_size, dtype=np.float32)
    grid = np.stack(np.meshgrid(axis, axis), axis=0)  # [2, S, S]: columns, then rows
    if scaling_factor is not None:
        grid = grid / scaling_factor
    if offset is not None:
        grid = grid - offset
    table = get_2d_sincos_pos_embed_from_grid(embed_dim, grid.reshape(2, 1, grid_size, grid_size))
    if cls_token and extra_tokens > 0:
        table = np.concatenate([np.zeros([extra_tokens, embed_dim]), table], axis=0)
    return table


def get_1d_sincos_pos_embed_from_grid_torch(embed_dim: int, pos: Any, device: Any = None, dtype: Any = None) -> Any:
    """torch `[M, embed_dim]` table (see `get_1d_sincos_pos_embed_from_grid`) in `dtype`
    (float32 by default) on `device`."""
    import torch

    from comfy_core.families.sd3.mmdit_blocks import sincos_1d

    dtype = torch.float32 if dtype is None else dtype
    return sincos_1d(embed_dim, torch.as_tensor(pos).to(device=device, dtype=dtype))


def gate_cat(x: Any, gate_msa: Any, gate_msa2: Any, attn1: Any, attn2: Any) -> Any:
    """`x + gate_msa * attn1 + gate_msa2 * attn2`: x/attn `[B, L, D]`, gates `[B, D]`."""
    import torch

    return torch.stack([x, gate_msa.unsqueeze(1) * attn1, gate_msa2.unsqueeze(1) * attn2], dim=0).sum(dim=0)


def rms_norm(x: Any, weight: Any = None, eps: float = 1e-6) -> Any:
    """RMSNorm over the last axis (common_dit's `rms_norm`), the weight cast to `x`'s dtype."""
    from comfy_core.families.sd3.mmdit_blocks import rms_norm as _rms_norm

    return _rms_norm(x, weight, eps)


class SwiGLUFeedForward(_SwiGLU):
    """The MMDiT file's `SwiGLUFeedForward(dim, hidden_dim, multiple_of, ffn_dim_multiplier=None)`:
    a hidden width of `2/3 * hidden_dim` (times the multiplier), rounded up to `multiple_of`; no
    biases, torch layers (as ComfyUI's). Our MMDiT blocks build the base class directly."""

    def __init__(self, dim: int, hidden_dim: int, multiple_of: int, ffn_dim_multiplier: Optional[float] = None,
                 **kwargs: Any) -> None:
        super().__init__(dim, int(2 * hidden_dim / 3), multiple_of, ffn_dim_multiplier, **kwargs)
