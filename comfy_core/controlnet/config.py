"""`ControlNetConfig`: a ControlNet's structure read from its weight names and shapes.

A ControlNet (Zhang et al. 2023, "Adding Conditional Control to Text-to-Image Diffusion
Models") is a trainable copy of the UNet's encoder half (`time_embed`, `label_emb`,
`input_blocks`, `middle_block`) plus a hint encoder (`input_hint_block`) and one zero-initialised
1x1 convolution per encoder output (`zero_convs`, `middle_block_out`). So its structure is a
`UNetConfig` without the decoder, read the way `UNetConfig.detect_from_weights` reads a UNet
(names and shapes only), plus the hint's channel count and, for xinsir's union/ProMax models,
the number of control types (`task_embedding` rows). The head layout is not in the weights: as
for SD1 vs SD2/SDXL UNets, 1x1-convolution transformer projections mean 8 heads, linear ones 64
channels per head (ComfyUI picks the same through its model detection).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from comfy_core.models.unet import UNetConfig, UNetConfigError
from comfy_core.models.weight_shapes import shape_reader


class ControlNetConfigError(ValueError):
    """The ControlNet weights are incomplete or inconsistent."""


@dataclass(frozen=True)
class ControlNetConfig:
    unet: UNetConfig  # the encoder half's structure (decoder fields unused)
    hint_channels: int = 3
    union_control_types: int | None = None  # task_embedding rows of a union ControlNet

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "ControlNetConfig":
        """The structure of the ControlNet under `prefix` (original `openaimodel` names)."""
        shape = shape_reader(tensors, prefix, ControlNetConfigError, "ControlNet")
        first = shape("input_blocks.0.0.weight")
        model_channels, in_channels = first[0], first[1]
        hint_channels = shape("input_hint_block.0.weight")[1]
        blocks = _blocks(tensors, prefix, "input_blocks")
        channel_mult: list[int] = []
        depths: list[int] = []
        res_in_level = 0
        num_res_blocks: int | None = None
        context_dim = use_linear = None
        for index in range(1, max(blocks, default=0) + 1):
            keys = blocks.get(index, set())
            if "0.op.weight" in keys:
                num_res_blocks = _same(num_res_blocks, res_in_level)
                res_in_level = 0
                continue
            if "0.out_layers.3.weight" not in keys:
                raise ControlNetConfigError(f"ControlNet input block {prefix}input_blocks.{index} is neither a "
                                            "ResBlock nor a Downsample")
            width = shape(f"input_blocks.{index}.0.out_layers.3.weight")[0]
            if res_in_level == 0:
                channel_mult.append(width // model_channels)
            res_in_level += 1
            depth = _count(keys, r"1\.transformer_blocks\.(\d+)\.")
            depths.append(depth)
            if depth:
                context_dim = shape(f"input_blocks.{index}.1.transformer_blocks.0.attn2.to_k.weight")[1]
                use_linear = len(shape(f"input_blocks.{index}.1.proj_in.weight")) == 2
        num_res_blocks = _same(num_res_blocks, res_in_level)
        middle = {k[len(prefix) + 13:] for k in tensors if k.startswith(prefix + "middle_block.")}
        depth_middle = _count(middle, r"1\.transformer_blocks\.(\d+)\.")
        if depth_middle and context_dim is None:
            context_dim = shape("middle_block.1.transformer_blocks.0.attn2.to_k.weight")[1]
            use_linear = len(shape("middle_block.1.proj_in.weight")) == 2
        if context_dim is None:
            raise ControlNetConfigError(f"ControlNet under {prefix!r} has no cross-attention")
        adm = shape("label_emb.0.0.weight")[1] if prefix + "label_emb.0.0.weight" in tensors else None
        union = shape("task_embedding")[0] if prefix + "task_embedding" in tensors else None
        heads = dict(num_heads=-1, num_head_channels=64) if use_linear else dict(num_heads=8, num_head_channels=-1)
        unet = UNetConfig(
            model_channels=model_channels, in_channels=in_channels, out_channels=in_channels,
            num_res_blocks=num_res_blocks, channel_mult=tuple(channel_mult), transformer_depth=tuple(depths),
            transformer_depth_output=(), transformer_depth_middle=depth_middle, context_dim=context_dim,
            use_linear_in_transformer=bool(use_linear), adm_in_channels=adm, **heads)
        return cls(unet=unet, hint_channels=hint_channels, union_control_types=union)


def _blocks(tensors: Mapping[str, Any], prefix: str, group: str) -> dict[int, set[str]]:
    pattern = re.compile(re.escape(f"{prefix}{group}.") + r"(\d+)\.(.*)")
    found: dict[int, set[str]] = {}
    for name in tensors:
        if (m := pattern.match(name)):
            found.setdefault(int(m.group(1)), set()).add(m.group(2))
    return found


def _count(keys: set[str], pattern: str) -> int:
    regex = re.compile(pattern)
    indices = {int(m.group(1)) for k in keys if (m := regex.match(k))}
    return max(indices) + 1 if indices else 0


def _same(previous: int | None, value: int) -> int:
    if previous is not None and previous != value:
        raise ControlNetConfigError(f"ControlNet: res blocks per level differ ({previous} vs {value})")
    return value


__all__ = ["ControlNetConfig", "ControlNetConfigError", "UNetConfigError"]
