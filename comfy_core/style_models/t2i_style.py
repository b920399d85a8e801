"""The T2I-Adapter style model (Mou et al. 2023, "T2I-Adapter", the `coadapter-style-sd15v1` /
`t2iadapter_style_sd14v1` files), after ComfyUI's `comfy/t2i_adapter/adapter.py: StyleAdapter`.

Learned style tokens `[1, T, W]` are appended to a CLIP ViT-L image's tokens `[B, 257, W]`; the
sequence goes through a layer norm, a few pre-norm transformer blocks (torch's multi-head
attention, quick-GELU MLP of 4x width, OpenAI CLIP's block), and the style tokens' outputs come
out through a layer norm and the projection `[W, ctx]` to the UNet's context width: `[B, T, ctx]`.

The geometry is read from the weights (`T2IStyleConfig.detect_from_weights`); the head count is
ComfyUI's fixed 8 (the released model: width 1024, 3 blocks, 8 tokens, context 768).
"""
from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Mapping

import torch
from torch import nn

HEADS = 8


@dataclass(frozen=True)
class T2IStyleConfig:
    width: int
    context_dim: int
    layers: int
    tokens: int
    heads: int = HEADS

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any]) -> "T2IStyleConfig":
        """From tensor shapes (`.shape` tuples). Raises ValueError for an inconsistent file."""
        _, tokens, width = tuple(tensors["style_embedding"].shape)
        proj_in, context_dim = tuple(tensors["proj"].shape)
        if proj_in != width:
            raise ValueError(f"style model: proj is {[proj_in, context_dim]}, expected [{width}, context]")
        blocks = {int(m.group(1)) for k in tensors if (m := re.match(r"transformer_layes\.(\d+)\.", k))}
        if not blocks or blocks != set(range(max(blocks) + 1)):
            raise ValueError(f"style model: transformer blocks {sorted(blocks)} are not 0..N-1")
        if width % HEADS:
            raise ValueError(f"style model: width {width} is not divisible by {HEADS} heads")
        return cls(width=width, context_dim=context_dim, layers=max(blocks) + 1, tokens=tokens)


class QuickGELU(nn.Module):
    """x * sigmoid(1.702 x), OpenAI CLIP's activation."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


class StyleBlock(nn.Module):
    """Pre-norm transformer block with OpenAI CLIP's parameter names (`attn`, `ln_1`, `mlp.c_fc`,
    `mlp.c_proj`, `ln_2`)."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        # batch_first only changes the call's layout, not the parameters (in_proj packs q, k, v).
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.ln_1 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(OrderedDict([("c_fc", nn.Linear(width, 4 * width)), ("gelu", QuickGELU()),
                                              ("c_proj", nn.Linear(4 * width, width))]))
        self.ln_2 = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, L, W]
        h = self.ln_1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln_2(x))


class T2IStyleAdapter(nn.Module):
    """CLIP vision tokens `[B, L, W]` -> style tokens `[B, T, ctx]` (parameter names as the files)."""

    def __init__(self, config: T2IStyleConfig) -> None:
        super().__init__()
        self.config = config
        self.transformer_layes = nn.Sequential(*[StyleBlock(config.width, config.heads) for _ in range(config.layers)])
        self.style_embedding = nn.Parameter(torch.empty(1, config.tokens, config.width))
        self.ln_pre = nn.LayerNorm(config.width)
        self.ln_post = nn.LayerNorm(config.width)
        self.proj = nn.Parameter(torch.empty(config.width, config.context_dim))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        batch = tokens.shape[0]
        style = self.style_embedding.expand(batch, -1, -1).to(tokens.dtype)
        x = self.ln_pre(torch.cat([tokens, style], dim=1))  # [B, L + T, W]
        x = self.transformer_layes(x)
        x = self.ln_post(x[:, -self.config.tokens:, :])  # [B, T, W]
        return x @ self.proj  # [B, T, ctx]
