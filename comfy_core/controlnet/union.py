"""The union/ProMax ControlNet-XL fusion blocks of xinsir's ControlNet++
(https://github.com/xinsir6/ControlNetPlus), as ComfyUI's `comfy/cldm/cldm.py` runs them.

- `ControlAddEmbedding`: a one-hot vector over the control types, each entry sinusoidally
  embedded (256 wide) and concatenated, through Linear-SiLU-Linear into the time embedding.
- `UnionFusion`: the hint's encoded features are mean-pooled to one token per hint, the task
  embedding of its control type added, passed through a CLIP-style residual attention block
  (`transformer_layes`, the files' spelling), projected (`spatial_ch_projs`) and added back to
  the features as a per-channel offset.

Parameter names follow the files (diffusers layout; `attn.in_proj_weight` is renamed to
`attn.in_proj.weight` when loading, as ComfyUI does).
"""
from __future__ import annotations

from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention import attention
from comfy_core.models.unet_blocks import timestep_embedding

TRANSFORMER_WIDTH = 320  # num_trans_channel in ControlNet++
TRANSFORMER_HEADS = 8
CONTROL_EMBED_DIM = 256


class QuickGELU(nn.Module):
    """`x * sigmoid(1.702 x)` (Radford et al. 2021, CLIP)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


class PackedAttention(nn.Module):
    """Self-attention with one packed q/k/v projection (`in_proj`) and `out_proj`."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.width = width
        self.heads = heads
        self.in_proj = nn.Linear(width, 3 * width)
        self.out_proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.in_proj(x).split(self.width, dim=2)  # each [B, N, W]
        return self.out_proj(attention(q, k, v, self.heads))


class ResidualAttentionBlock(nn.Module):
    """Pre-norm attention and QuickGELU MLP, each residual."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.attn = PackedAttention(width, heads)
        self.ln_1 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(OrderedDict([("c_fc", nn.Linear(width, 4 * width)), ("gelu", QuickGELU()),
                                              ("c_proj", nn.Linear(4 * width, width))]))
        self.ln_2 = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class ControlAddEmbedding(nn.Module):
    def __init__(self, num_control_type: int, out_dim: int, in_dim: int = CONTROL_EMBED_DIM) -> None:
        super().__init__()
        self.num_control_type = num_control_type
        self.in_dim = in_dim
        self.linear_1 = nn.Linear(in_dim * num_control_type, out_dim)
        self.linear_2 = nn.Linear(out_dim, out_dim)

    def forward(self, control_type: list[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        one_hot = torch.zeros((self.num_control_type,), device=device)
        one_hot[control_type] = 1.0
        emb = timestep_embedding(one_hot, self.in_dim).to(dtype)  # [types, in_dim]
        emb = emb.reshape(-1, self.num_control_type * self.in_dim)  # [1, types * in_dim]
        return self.linear_2(F.silu(self.linear_1(emb)))  # [1, out_dim]


def union_fuse(hint_block: nn.Module, task_embedding: torch.Tensor, transformer: nn.Module,
               projection: nn.Module, hint: torch.Tensor, control_type: list[int], emb: torch.Tensor,
               context: torch.Tensor) -> torch.Tensor:
    """The fused hint features `[B, C, h, w]` for `hint` `[K, B, 3, H, W]` (K hints) of the given
    control types; like ComfyUI (ControlNet++'s single-condition path) only the first hint is
    encoded and tokenised."""
    tokens = []
    features = []
    for idx in range(min(1, len(control_type))):
        encoded = hint_block(hint[idx], emb, context)  # [B, C, h, w]
        token = encoded.mean(dim=(2, 3))  # [B, C]
        token = token + task_embedding[control_type[idx]].to(dtype=token.dtype, device=token.device)
        tokens.append(token.unsqueeze(1))
        features.append(encoded)
    x = transformer(torch.cat(tokens, dim=1))  # [B, K', C]
    fused = None
    for idx in range(len(control_type)):
        alpha = projection(x[:, idx])[:, :, None, None]  # [B, C, 1, 1]
        out = features[idx] + alpha
        fused = out if fused is None else fused + out
    return fused
