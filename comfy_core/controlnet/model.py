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

Built from a `ControlNetConfig`, or, as ComfyUI's `comfy/cldm/cldm.py: ControlNet(**config)`
(how Advanced-ControlNet builds its SparseCtrl subclass), from ComfyUI's keyword arguments
(`model_channels=..., hint_channels=..., transformer_depth=[...], operations=..., dtype=...`).
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
from comfy_core.models.unet import TimestepEmbedSequential, UNetConfigError, config_from_comfy_kwargs
from comfy_core.models.unet_blocks import Downsample, ResBlock, operations_or_default, timestep_embedding

# (out channels, stride) of the hint encoder's convolutions after the first (hint -> 16).
_HINT_LAYERS = ((16, 1), (32, 2), (32, 1), (96, 2), (96, 1), (256, 2))


class ControlNetError(ValueError):
    """Inputs the ControlNet cannot run on (an unknown union control type, a missing y)."""


# The named parameters of ComfyUI's cldm `ControlNet.__init__`; anything else goes to its
# `**kwargs`, which it ignores (Advanced-ControlNet's SparseCtrl passes its own options that way).
_COMFY_PARAMETERS = frozenset((
    "image_size", "in_channels", "model_channels", "hint_channels", "num_res_blocks", "dropout", "channel_mult",
    "conv_resample", "dims", "num_classes", "use_checkpoint", "num_heads", "num_head_channels",
    "num_heads_upsample", "use_scale_shift_norm", "resblock_updown", "use_new_attention_order",
    "use_spatial_transformer", "transformer_depth", "context_dim", "n_embed", "legacy", "disable_self_attentions",
    "num_attention_blocks", "disable_middle_self_attn", "use_linear_in_transformer", "adm_in_channels",
    "transformer_depth_middle", "transformer_depth_output", "attn_precision", "union_controlnet_num_control_type",
    "out_channels"))


def config_from_comfy_controlnet_kwargs(kwargs: dict[str, Any]) -> ControlNetConfig:
    """A `ControlNetConfig` from ComfyUI's cldm `ControlNet(**kwargs)` arguments: the UNet ones
    as `comfy_core.models.unet.config_from_comfy_kwargs` reads them (a ControlNet has no decoder,
    so `out_channels` and `transformer_depth_output` may be absent), plus `hint_channels` and
    `union_controlnet_num_control_type`."""
    kw = {k: v for k, v in kwargs.items() if k in _COMFY_PARAMETERS}
    if "hint_channels" not in kw:
        raise UNetConfigError("ControlNet: ComfyUI arguments lack hint_channels")
    hint_channels = int(kw.pop("hint_channels"))
    union = kw.pop("union_controlnet_num_control_type", None)
    kw.setdefault("out_channels", kw.get("in_channels"))
    nrb, mult = kw.get("num_res_blocks"), kw.get("channel_mult", (1, 2, 4, 8))
    depth = kw.get("transformer_depth")
    if isinstance(depth, int) and isinstance(nrb, int):
        kw["transformer_depth"] = [depth] * (len(mult) * nrb)
    if "transformer_depth_output" not in kw and isinstance(nrb, int):
        kw["transformer_depth_output"] = [0] * (len(mult) * (nrb + 1))
    kw.setdefault("transformer_depth_middle", (kw.get("transformer_depth") or [0])[-1])
    return ControlNetConfig(unet=config_from_comfy_kwargs(kw), hint_channels=hint_channels,
                            union_control_types=union)


def _zero_conv(channels: int, ops: Any, layer: dict) -> TimestepEmbedSequential:
    return TimestepEmbedSequential(ops.conv_nd(2, channels, channels, 1, **layer))


def _hint_block(hint_channels: int, model_channels: int, ops: Any, layer: dict) -> TimestepEmbedSequential:
    layers: list[nn.Module] = [ops.conv_nd(2, hint_channels, 16, 3, padding=1, **layer), nn.SiLU()]
    ch = 16
    for out, stride in _HINT_LAYERS:
        layers += [ops.conv_nd(2, ch, out, 3, padding=1, stride=stride, **layer), nn.SiLU()]
        ch = out
    layers.append(ops.conv_nd(2, ch, model_channels, 3, padding=1, **layer))
    return TimestepEmbedSequential(*layers)


class ControlNetModel(nn.Module):
    def __init__(self, config: ControlNetConfig | None = None, *, operations: Any = None, dtype: Any = None,
                 device: Any = None, **comfy_kwargs: Any) -> None:
        super().__init__()
        if config is None:
            config = config_from_comfy_controlnet_kwargs(comfy_kwargs)
        elif comfy_kwargs:
            raise UNetConfigError(f"ControlNet: pass a ControlNetConfig or ComfyUI's keyword arguments, not both "
                                  f"(got {sorted(comfy_kwargs)})")
        self.config = config
        u = config.unet
        c = u.model_channels
        emb_dim = 4 * c
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device, "operations": ops}
        layer = {"dtype": dtype, "device": device}
        # ComfyUI's attribute names (packs' subclasses read them, e.g. SparseCtrl's hint block)
        self.dims = 2
        self.model_channels = c
        self.in_channels = u.in_channels
        self.hint_channels = config.hint_channels
        self.num_classes = "sequential" if u.adm_in_channels is not None else None

        def transformer(ch: int, depth: int) -> SpatialTransformer:
            heads, dim_head = u.heads_for(ch)
            return SpatialTransformer(ch, heads, dim_head, depth=depth, context_dim=u.context_dim,
                                      use_linear=u.use_linear_in_transformer, **factory)

        self.time_embed = nn.Sequential(ops.Linear(c, emb_dim, **layer), nn.SiLU(),
                                        ops.Linear(emb_dim, emb_dim, **layer))
        if u.adm_in_channels is not None:
            self.label_emb = nn.Sequential(nn.Sequential(
                ops.Linear(u.adm_in_channels, emb_dim, **layer), nn.SiLU(), ops.Linear(emb_dim, emb_dim, **layer)))
        self.input_blocks = nn.ModuleList([TimestepEmbedSequential(
            ops.conv_nd(2, u.in_channels, c, 3, padding=1, **layer))])
        self.zero_convs = nn.ModuleList([_zero_conv(c, ops, layer)])
        self.input_hint_block = _hint_block(config.hint_channels, c, ops, layer)
        ch = c
        for level, mult in enumerate(u.channel_mult):
            for r in range(u.num_res_blocks):
                layers: list[nn.Module] = [ResBlock(ch, emb_dim, 0.0, out_channels=c * mult, **factory)]
                ch = c * mult
                depth = u.transformer_depth[level * u.num_res_blocks + r]
                if depth:
                    layers.append(transformer(ch, depth))
                self.input_blocks.append(TimestepEmbedSequential(*layers))
                self.zero_convs.append(_zero_conv(ch, ops, layer))
            if level != len(u.channel_mult) - 1:
                self.input_blocks.append(TimestepEmbedSequential(Downsample(ch, True, **factory)))
                self.zero_convs.append(_zero_conv(ch, ops, layer))
        middle: list[nn.Module] = [ResBlock(ch, emb_dim, 0.0, out_channels=ch, **factory)]
        if u.transformer_depth_middle:
            middle.append(transformer(ch, u.transformer_depth_middle))
        middle.append(ResBlock(ch, emb_dim, 0.0, out_channels=ch, **factory))
        self.middle_block = TimestepEmbedSequential(*middle)
        self.middle_block_out = _zero_conv(ch, ops, layer)
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
