"""`ControlNetModel`: the ControlNet network on our UNet building blocks.

Zhang et al. 2023 ("Adding Conditional Control to Text-to-Image Diffusion Models"): a copy of
the UNet encoder (`input_blocks`, `middle_block`, same ResBlocks and spatial transformers as
`comfy_core.models.unet`) fed `x + hint_features` after its first convolution, where the hint
image goes through `input_hint_block` (eight 3x3 convolutions with SiLU, three of them stride 2,
so an 8x smaller feature map). Every encoder output passes a 1x1 `zero_convs` convolution, the
middle one `middle_block_out`; these are the residuals the UNet adds to its skip connections and
middle block. Parameter names follow the original `cldm.py` layout so files load unrenamed.

`forward(x, hint, timesteps, context, y=None, control_type=None)` returns
`{"middle": [m], "output": [z_0, ..., z_n]}` (ComfyUI's keys: "output" are the residuals of the
skip connections, which the UNet pops from the end as it walks its output blocks).
Union/ProMax models (xinsir's ControlNet++) add the task embedding (`comfy_core.controlnet.union`).
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from comfy_core.controlnet.config import ControlNetConfig
from comfy_core.controlnet.types import UNION_CONTROLNET_TYPES
from comfy_core.controlnet.union import (TRANSFORMER_HEADS, TRANSFORMER_WIDTH, ControlAddEmbedding,
                                         ResidualAttentionBlock, union_fuse)
from comfy_core.models.transformer import SpatialTransformer
from comfy_core.models.unet import TimestepEmbedSequential
from comfy_core.models.unet_blocks import Downsample, ResBlock, timestep_embedding

# (out channels, stride) of the hint encoder's convolutions after the first (hint -> 16).
_HINT_LAYERS = ((16, 1), (32, 2), (32, 1), (96, 2), (96, 1), (256, 2))


class ControlNetError(ValueError):
    """Inputs the ControlNet cannot run on (an unknown union control type, a missing y)."""


def _zero_conv(channels: int) -> TimestepEmbedSequential:
    return TimestepEmbedSequential(nn.Conv2d(channels, channels, 1))


def _hint_block(hint_channels: int, model_channels: int) -> TimestepEmbedSequential:
    layers: list[nn.Module] = [nn.Conv2d(hint_channels, 16, 3, padding=1), nn.SiLU()]
    ch = 16
    for out, stride in _HINT_LAYERS:
        layers += [nn.Conv2d(ch, out, 3, padding=1, stride=stride), nn.SiLU()]
        ch = out
    layers.append(nn.Conv2d(ch, model_channels, 3, padding=1))
    return TimestepEmbedSequential(*layers)


class ControlNetModel(nn.Module):
    def __init__(self, config: ControlNetConfig) -> None:
        super().__init__()
        self.config = config
        u = config.unet
        c = u.model_channels
        emb_dim = 4 * c

        def transformer(ch: int, depth: int) -> SpatialTransformer:
            heads, dim_head = u.heads_for(ch)
            return SpatialTransformer(ch, heads, dim_head, depth=depth, context_dim=u.context_dim,
                                      use_linear=u.use_linear_in_transformer)

        self.time_embed = nn.Sequential(nn.Linear(c, emb_dim), nn.SiLU(), nn.Linear(emb_dim, emb_dim))
        if u.adm_in_channels is not None:
            self.label_emb = nn.Sequential(nn.Sequential(
                nn.Linear(u.adm_in_channels, emb_dim), nn.SiLU(), nn.Linear(emb_dim, emb_dim)))
        self.input_blocks = nn.ModuleList([TimestepEmbedSequential(nn.Conv2d(u.in_channels, c, 3, padding=1))])
        self.zero_convs = nn.ModuleList([_zero_conv(c)])
        self.input_hint_block = _hint_block(config.hint_channels, c)
        ch = c
        for level, mult in enumerate(u.channel_mult):
            for r in range(u.num_res_blocks):
                layers: list[nn.Module] = [ResBlock(ch, emb_dim, 0.0, out_channels=c * mult)]
                ch = c * mult
                depth = u.transformer_depth[level * u.num_res_blocks + r]
                if depth:
                    layers.append(transformer(ch, depth))
                self.input_blocks.append(TimestepEmbedSequential(*layers))
                self.zero_convs.append(_zero_conv(ch))
            if level != len(u.channel_mult) - 1:
                self.input_blocks.append(TimestepEmbedSequential(Downsample(ch)))
                self.zero_convs.append(_zero_conv(ch))
        middle: list[nn.Module] = [ResBlock(ch, emb_dim, 0.0, out_channels=ch)]
        if u.transformer_depth_middle:
            middle.append(transformer(ch, u.transformer_depth_middle))
        middle.append(ResBlock(ch, emb_dim, 0.0, out_channels=ch))
        self.middle_block = TimestepEmbedSequential(*middle)
        self.middle_block_out = _zero_conv(ch)
        if config.union_control_types is not None:
            n = config.union_control_types
            self.task_embedding = nn.Parameter(torch.empty(n, TRANSFORMER_WIDTH))
            self.transformer_layes = nn.Sequential(ResidualAttentionBlock(TRANSFORMER_WIDTH, TRANSFORMER_HEADS))
            self.spatial_ch_projs = nn.Linear(TRANSFORMER_WIDTH, TRANSFORMER_WIDTH)
            self.control_add_embedding = ControlAddEmbedding(n, emb_dim)
        else:
            self.task_embedding = None
            self.control_add_embedding = None

    @property
    def dtype(self) -> torch.dtype:
        return self.input_blocks[0][0].weight.dtype

    def forward(self, x: torch.Tensor, hint: torch.Tensor, timesteps: torch.Tensor, context: torch.Tensor,
                y: torch.Tensor | None = None, control_type: list[int] | None = None,
                **_ignored: Any) -> dict[str, list[torch.Tensor]]:
        """x [B, in, h, w] (model input), hint [B, hint, 8h, 8w] ([K, B, ...] for union models),
        timesteps [B], context [B, M, ctx], y [B, adm] -> residuals (see module docstring)."""
        u = self.config.unet
        emb = self.time_embed(timestep_embedding(timesteps, u.model_channels).to(x.dtype))  # [B, 4C]
        guided = None
        if self.control_add_embedding is not None:
            control_type = list(control_type or [])
            n = self.config.union_control_types
            if any(t >= n for t in control_type):
                names = {v: k for k, v in UNION_CONTROLNET_TYPES.items()}
                worst = max(control_type)
                raise ControlNetError(
                    f"union ControlNet: control type {names.get(worst, worst)} ({worst}) is out of range for the "
                    f"{n} control types this model supports (use the ProMax union model for it)")
            emb = emb + self.control_add_embedding(control_type, emb.dtype, emb.device)
            if control_type:
                if hint.ndim < 5:
                    hint = hint.unsqueeze(0)
                guided = union_fuse(self.input_hint_block, self.task_embedding, self.transformer_layes,
                                    self.spatial_ch_projs, hint, control_type, emb, context)
        if guided is None:
            guided = self.input_hint_block(hint, emb, context)  # [B, C, h, w]
        if u.adm_in_channels is not None:
            if y is None or y.shape[0] != x.shape[0]:
                raise ControlNetError(f"ControlNet: needs y [B={x.shape[0]}, {u.adm_in_channels}] (an SDXL ControlNet "
                                      f"on a model without the pooled/size embedding?), got "
                                      f"{None if y is None else tuple(y.shape)}")
            emb = emb + self.label_emb(y.to(emb.dtype))
        outputs = []
        h = x
        for index, (block, zero) in enumerate(zip(self.input_blocks, self.zero_convs)):
            h = block(h, emb, context)
            if index == 0:
                h = h + guided
            outputs.append(zero(h, emb, context))
        h = self.middle_block(h, emb, context)
        return {"middle": [self.middle_block_out(h, emb, context)], "output": outputs}
