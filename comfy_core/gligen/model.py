"""The GLIGEN grounding model: a position net that turns (text embedding, box) pairs into object
tokens, and per-transformer gated self-attention layers that mix them into the image tokens.

Li et al. 2023 ("GLIGEN: Open-Set Grounded Text-to-Image Generation", sec. 3.2, eq. 8): in each
transformer block, between self-attention and cross-attention,
`v = v + tanh(gamma_attn) * TS(SelfAttn(norm([v, linear(objs)])))` (TS keeps the visual tokens) and
`v = v + tanh(gamma_dense) * FF(norm(v))`; the object tokens come from an MLP over the pooled
text embedding and a Fourier embedding of the box corners (Mildenhall et al. 2020's positional
encoding), with learned "null" features standing in for padding slots.

Behaviour (the 30 object slots, boxes as (x1, y1, x2, y2) fractions of the latent area, one fuser
per SpatialTransformer indexed by `transformer_index`, the head layout rule) follows ComfyUI's
`comfy/gligen.py`; written here. Parameter names are the released files'
(`position_net.linears.N`, `position_net.null_positive_feature`, `null_position_feature`, and
per fuser `linear`, `attn.to_q/to_k/to_v/to_out.0`, `ff.net.0.proj`, `ff.net.2`, `norm1`,
`norm2`, `alpha_attn`, `alpha_dense`).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
from torch import nn

from comfy_core.models.transformer import CrossAttention, FeedForward

MAX_OBJS = 30
FOURIER_FREQS = 8
FOURIER_TEMPERATURE = 100.0
POSITION_DIM = FOURIER_FREQS * 2 * 4  # sin and cos of 8 frequencies for each of x1, y1, x2, y2


class GligenError(ValueError):
    """GLIGEN inputs that do not fit (too many boxes, wrong embedding width)."""


def fourier_embedding(x: torch.Tensor, num_freqs: int = FOURIER_FREQS,
                      temperature: float = FOURIER_TEMPERATURE) -> torch.Tensor:
    """`[..., D]` -> `[..., D * 2 * num_freqs]`: per frequency f_k = T^(k / n), sin(f_k x) then cos(f_k x)."""
    freqs = temperature ** (torch.arange(num_freqs) / num_freqs)
    parts = []
    for freq in freqs:
        parts.append(torch.sin(freq * x))
        parts.append(torch.cos(freq * x))
    return torch.cat(parts, dim=-1)


def heads_for(query_dim: int, key_dim: int) -> tuple[int, int]:
    """(heads, channels per head) of a fuser: 8 heads for SD1's 768-wide text (ComfyUI's rule),
    else 64-channel heads; widths that are not a multiple of 64 (tiny test files only) use 8."""
    if key_dim == 768 or query_dim % 64:
        return 8, query_dim // 8
    return query_dim // 64, 64


class PositionNet(nn.Module):
    """(box [B, N, 4], slot mask [B, N], text embedding [B, N, in_dim]) -> object tokens [B, N, out_dim]."""

    def __init__(self, in_dim: int, out_dim: int, hidden: int = 512) -> None:
        super().__init__()
        self.in_dim = in_dim
        self.out_dim = out_dim
        self.linears = nn.Sequential(nn.Linear(in_dim + POSITION_DIM, hidden), nn.SiLU(), nn.Linear(hidden, hidden),
                                     nn.SiLU(), nn.Linear(hidden, out_dim))
        self.null_positive_feature = nn.Parameter(torch.zeros(in_dim))
        self.null_position_feature = nn.Parameter(torch.zeros(POSITION_DIM))

    def forward(self, boxes: torch.Tensor, masks: torch.Tensor, positive: torch.Tensor) -> torch.Tensor:
        masks = masks.unsqueeze(-1)  # [B, N, 1]
        xyxy = fourier_embedding(boxes)  # [B, N, 64]
        null_text = self.null_positive_feature.to(device=boxes.device, dtype=boxes.dtype).view(1, 1, -1)
        null_box = self.null_position_feature.to(device=boxes.device, dtype=boxes.dtype).view(1, 1, -1)
        positive = positive * masks + (1 - masks) * null_text  # padding slots get the null features
        xyxy = xyxy * masks + (1 - masks) * null_box
        return self.linears(torch.cat([positive, xyxy], dim=-1))


class GatedSelfAttention(nn.Module):
    """One fuser: image tokens [B, N, query_dim] attend over themselves plus the object tokens."""

    def __init__(self, query_dim: int, context_dim: int, heads: int, dim_head: int) -> None:
        super().__init__()
        self.linear = nn.Linear(context_dim, query_dim)
        self.attn = CrossAttention(query_dim, None, heads, dim_head)
        self.ff = FeedForward(query_dim, glu=True)  # GEGLU, as ComfyUI's gligen.py
        self.norm1 = nn.LayerNorm(query_dim)
        self.norm2 = nn.LayerNorm(query_dim)
        self.alpha_attn = nn.Parameter(torch.tensor(0.0))
        self.alpha_dense = nn.Parameter(torch.tensor(0.0))

    def forward(self, x: torch.Tensor, objs: torch.Tensor) -> torch.Tensor:
        visual = x.shape[1]
        objs = self.linear(objs)  # [B, 30, query_dim]
        x = x + torch.tanh(self.alpha_attn) * self.attn(self.norm1(torch.cat([x, objs], dim=1)))[:, :visual]
        return x + torch.tanh(self.alpha_dense) * self.ff(self.norm2(x))


class GligenModel(nn.Module):
    """`module_list[i]` is the fuser of the UNet's i-th SpatialTransformer; `key_dim` the text width."""

    def __init__(self, fusers: Sequence[GatedSelfAttention], position_net: PositionNet, key_dim: int) -> None:
        super().__init__()
        self.module_list = nn.ModuleList(fusers)
        self.position_net = position_net
        self.key_dim = key_dim
        self.max_objs = MAX_OBJS

    def _patch(self, boxes: torch.Tensor, masks: torch.Tensor, positive: torch.Tensor) -> Callable[..., torch.Tensor]:
        """The `middle_patch(x, extra_options)` grounding on these object slots."""
        weight = self.position_net.linears[0].weight
        objs = self.position_net(boxes.to(weight.device, weight.dtype), masks.to(weight.device, weight.dtype),
                                 positive.to(weight.device, weight.dtype))  # [B, 30, out_dim]

        def middle_patch(x: torch.Tensor, extra_options: dict[str, Any]) -> torch.Tensor:
            fuser = self.module_list[extra_options["transformer_index"]]
            dtype = fuser.linear.weight.dtype
            out = fuser(x.to(dtype), objs.to(device=x.device, dtype=dtype))
            return out.to(x.dtype)

        middle_patch.objs = objs  # what the fusers receive (for inspection)
        return middle_patch

    def set_position(self, latent_shape: Sequence[int], position_params: Sequence[Sequence[Any]],
                     device: torch.device | str) -> Callable[..., torch.Tensor]:
        """Ground `position_params` = [(text embedding [1, key_dim], h, w, y, x) in latent units] on
        a latent area of `latent_shape` [B, C, h, w]; boxes are fractions of that area."""
        batch, _, height, width = latent_shape
        if len(position_params) > self.max_objs:
            raise GligenError(f"GLIGEN takes at most {self.max_objs} boxes, got {len(position_params)}")
        boxes = torch.zeros(self.max_objs, 4)
        masks = torch.zeros(self.max_objs)
        texts = torch.zeros(self.max_objs, self.key_dim)
        for i, (text, h, w, y, x) in enumerate(position_params):
            text = torch.as_tensor(text).reshape(-1)
            if text.shape[0] != self.key_dim:
                raise GligenError(f"GLIGEN box {i}: text embedding is {text.shape[0]} wide, the model takes "
                                  f"{self.key_dim} (a CLIP of another model family?)")
            boxes[i] = torch.tensor((x / width, y / height, (x + w) / width, (y + h) / height))
            masks[i] = 1.0
            texts[i] = text.float().cpu()
        return self._patch(boxes.unsqueeze(0).repeat(batch, 1, 1).to(device), masks.unsqueeze(0).repeat(batch, 1).to(device),
                           texts.unsqueeze(0).repeat(batch, 1, 1).to(device))

    def set_empty(self, latent_shape: Sequence[int], device: torch.device | str) -> Callable[..., torch.Tensor]:
        """The same with every slot empty (null features only)."""
        batch = latent_shape[0]
        return self._patch(torch.zeros(batch, self.max_objs, 4, device=device),
                           torch.zeros(batch, self.max_objs, device=device),
                           torch.zeros(batch, self.max_objs, self.key_dim, device=device))
