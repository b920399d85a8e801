"""The latent-diffusion UNet in its original single-file layout, and `UNetConfig` read from weights.

Architecture: Ronneberger et al. 2015 (U-Net) with the DDPM ResBlocks of Ho et al. 2020 and the
spatial cross-attention of Rombach et al. 2022 ("High-Resolution Image Synthesis with Latent
Diffusion Models"); SDXL's per-level transformer depth and size/pooled-text "label" embedding from
Podell et al. 2023 ("SDXL: Improving Latent Diffusion Models for High-Resolution Image Synthesis").
Parameter names are the checkpoint's `model.diffusion_model.*` names (CompVis/Stability
`openaimodel.py` layout): `time_embed`, `label_emb`, `input_blocks`, `middle_block`,
`output_blocks`, `out`. Written here from those descriptions.

`UNetConfig.detect_from_weights(tensors, prefix)` reads names and shapes only (the approach of
ComfyUI's `comfy/model_detection.py` and stable-diffusion.cpp's loaders): widths from
`input_blocks.0.0.weight`, levels and res blocks from the numbered blocks, transformer depth per
block from counted `transformer_blocks`, context width from `attn2.to_k`, linear vs conv
projections from `proj_in`'s rank, ADM width from `label_emb.0.0.weight`. The head layout cannot
be seen in weights: the family supplies it (`num_heads` or `num_head_channels`).
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, Mapping

import torch
from torch import nn

from comfy_core.models.transformer import SpatialTransformer
from comfy_core.models.unet_blocks import Downsample, ResBlock, Upsample, timestep_embedding
from comfy_core.models.weight_shapes import shape_reader

log = logging.getLogger(__name__)


class UNetConfigError(ValueError):
    """The UNet weights are incomplete or inconsistent, or the config is impossible."""


@dataclass(frozen=True)
class UNetConfig:
    model_channels: int = 320
    in_channels: int = 4
    out_channels: int = 4
    num_res_blocks: int = 2
    channel_mult: tuple[int, ...] = (1, 2, 4, 4)
    # Transformer depth per input block (levels * num_res_blocks entries; 0 = no transformer),
    # per output block (levels * (num_res_blocks + 1)), and in the middle block.
    transformer_depth: tuple[int, ...] = (1, 1, 1, 1, 1, 1, 0, 0)
    transformer_depth_output: tuple[int, ...] = (0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1)
    transformer_depth_middle: int = 1
    context_dim: int = 768
    use_linear_in_transformer: bool = False  # SD1: 1x1 conv projections; SD2/SDXL: linear
    adm_in_channels: int | None = None  # SDXL "label" (pooled text + size) embedding input width
    # Heads: exactly one of these is set (> 0). SD1: 8 heads; SD2/SDXL: 64 channels per head.
    num_heads: int = 8
    num_head_channels: int = -1

    @property
    def levels(self) -> int:
        return len(self.channel_mult)

    def heads_for(self, channels: int) -> tuple[int, int]:
        """(heads, channels per head) of a transformer on `channels` channels."""
        if self.num_head_channels > 0:
            if channels % self.num_head_channels:
                raise UNetConfigError(
                    f"UNet: {channels} channels are not a multiple of {self.num_head_channels} channels per head")
            return channels // self.num_head_channels, self.num_head_channels
        if self.num_heads <= 0 or channels % self.num_heads:
            raise UNetConfigError(f"UNet: {channels} channels cannot be split into {self.num_heads} heads")
        return self.num_heads, channels // self.num_heads

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "model.diffusion_model.") -> "UNetConfig":
        """The structure of the UNet under `prefix` from names and shapes (`tensors[name].shape`).

        Head layout fields keep their defaults: the caller (the family) replaces them.
        Raises `UNetConfigError` naming the key when the weights are incomplete.
        """
        shape = shape_reader(tensors, prefix, UNetConfigError, "UNet")

        first = shape("input_blocks.0.0.weight")
        model_channels, in_channels = first[0], first[1]
        out_channels = shape("out.2.weight")[0]
        blocks = _block_keys(tensors, prefix, "input_blocks")
        out_blocks = _block_keys(tensors, prefix, "output_blocks")

        channel_mult: list[int] = []
        depths: list[int] = []
        res_in_level = 0
        num_res_blocks = None
        context_dim = None
        use_linear = None
        for index in range(1, max(blocks) + 1 if blocks else 1):
            keys = blocks.get(index, set())
            if "0.op.weight" in keys:  # a Downsample ends the level
                num_res_blocks = _same(num_res_blocks, res_in_level, "num_res_blocks")
                res_in_level = 0
                continue
            if "0.out_layers.3.weight" not in keys:
                raise UNetConfigError(f"UNet input block {prefix}input_blocks.{index} is neither a ResBlock nor a Downsample")
            width = shape(f"input_blocks.{index}.0.out_layers.3.weight")[0]
            if res_in_level == 0:
                channel_mult.append(width // model_channels)
            res_in_level += 1
            depth = _count(keys, r"1\.transformer_blocks\.(\d+)\.")
            depths.append(depth)
            if depth:
                context_dim = shape(f"input_blocks.{index}.1.transformer_blocks.0.attn2.to_k.weight")[1]
                use_linear = len(shape(f"input_blocks.{index}.1.proj_in.weight")) == 2
        num_res_blocks = _same(num_res_blocks, res_in_level, "num_res_blocks")
        mid_keys = {k[len(prefix) + len("middle_block."):] for k in tensors if k.startswith(prefix + "middle_block.")}
        depth_middle = _count(mid_keys, r"1\.transformer_blocks\.(\d+)\.")
        if depth_middle and context_dim is None:
            context_dim = shape("middle_block.1.transformer_blocks.0.attn2.to_k.weight")[1]
            use_linear = len(shape("middle_block.1.proj_in.weight")) == 2
        depth_out = [_count(out_blocks.get(i, set()), r"1\.transformer_blocks\.(\d+)\.")
                     for i in range(len(out_blocks))]
        adm = shape("label_emb.0.0.weight")[1] if prefix + "label_emb.0.0.weight" in tensors else None
        if context_dim is None:
            raise UNetConfigError(f"UNet under {prefix!r} has no cross-attention (not a text-conditioned UNet)")
        expected_out = len(channel_mult) * (num_res_blocks + 1)
        if len(depth_out) != expected_out:
            raise UNetConfigError(
                f"UNet under {prefix!r}: {len(depth_out)} output blocks, expected {expected_out} "
                f"for {len(channel_mult)} levels of {num_res_blocks} res blocks")
        return cls(
            model_channels=model_channels, in_channels=in_channels, out_channels=out_channels,
            num_res_blocks=num_res_blocks, channel_mult=tuple(channel_mult),
            transformer_depth=tuple(depths), transformer_depth_output=tuple(depth_out),
            transformer_depth_middle=depth_middle, context_dim=context_dim,
            use_linear_in_transformer=bool(use_linear), adm_in_channels=adm,
        )


def _block_keys(tensors: Mapping[str, Any], prefix: str, group: str) -> dict[int, set[str]]:
    """`{block index: {key suffix after "<group>.<index>."}}` for one numbered block group."""
    pattern = re.compile(re.escape(f"{prefix}{group}.") + r"(\d+)\.(.*)")
    found: dict[int, set[str]] = {}
    for name in tensors:
        m = pattern.match(name)
        if m:
            found.setdefault(int(m.group(1)), set()).add(m.group(2))
    return found


def _count(keys: set[str], pattern: str) -> int:
    regex = re.compile(pattern)
    indices = {int(m.group(1)) for k in keys if (m := regex.match(k))}
    return max(indices) + 1 if indices else 0


def _same(previous: int | None, value: int, what: str) -> int:
    if previous is not None and previous != value:
        raise UNetConfigError(f"UNet: {what} differs between levels ({previous} vs {value})")
    return value


class TimestepBlock(nn.Sequential):
    """A sequence of ResBlock / SpatialTransformer / Down- or Upsample, each fed what it needs
    (ComfyUI's `forward_timestep_embed`, with its `transformer_index` count and its
    `forward_timestep_embed_patch` handlers for the other layers)."""

    def forward(self, x: torch.Tensor, emb: torch.Tensor, context: torch.Tensor | None,  # type: ignore[override]
                transformer_options: dict[str, Any] | None = None,
                output_shape: tuple[int, ...] | None = None) -> torch.Tensor:
        for layer in self:
            if isinstance(layer, ResBlock):
                x = layer(x, emb)
            elif isinstance(layer, SpatialTransformer):
                x = layer(x, context, transformer_options)
                if transformer_options and "transformer_index" in transformer_options:
                    transformer_options["transformer_index"] += 1
            elif isinstance(layer, Upsample):
                x = layer(x, output_shape)
            else:
                handler = _embed_patch(layer, transformer_options)
                if handler is not None:
                    x = handler(layer, x, emb, context, transformer_options, output_shape, None, None, None)
                else:
                    x = layer(x)
        return x


def _embed_patch(layer: nn.Module, transformer_options: dict[str, Any] | None) -> Any:
    """The first `forward_timestep_embed_patch` handler `(class, handler)` whose class `layer` is."""
    if not transformer_options:
        return None
    for class_type, handler in transformer_options.get("patches", {}).get("forward_timestep_embed_patch", ()):
        if isinstance(layer, class_type):
            return handler
    return None


def apply_control(h: torch.Tensor, control: dict[str, list] | None, name: str) -> torch.Tensor:
    """Add the next ControlNet residual for `name` ("input", "middle", "output") to `h`.

    As ComfyUI's `openaimodel.apply_control`: residuals are popped from the END of
    `control[name]` (ControlNets list them in block order), a None entry is skipped, and a
    residual whose shape does not fit is logged and dropped rather than failing the step."""
    if not control or not control.get(name):
        return h
    residual = control[name].pop()
    if residual is None:
        return h
    try:
        h += residual
    except RuntimeError:
        log.warning("ControlNet residual %s could not be added to %s; skipped",
                    tuple(residual.shape), tuple(h.shape))
    return h


class UNetModel(nn.Module):
    """The text-conditioned UNet: `forward(x, timesteps, context, y=None) -> model output`."""

    def __init__(self, config: UNetConfig) -> None:
        super().__init__()
        self.config = config
        c = config.model_channels
        emb_dim = 4 * c
        levels = config.levels
        if len(config.transformer_depth) != levels * config.num_res_blocks:
            raise UNetConfigError(f"UNet: transformer_depth needs {levels * config.num_res_blocks} entries, "
                                  f"got {len(config.transformer_depth)}")
        if len(config.transformer_depth_output) != levels * (config.num_res_blocks + 1):
            raise UNetConfigError(f"UNet: transformer_depth_output needs {levels * (config.num_res_blocks + 1)} "
                                  f"entries, got {len(config.transformer_depth_output)}")

        def transformer(ch: int, depth: int) -> SpatialTransformer:
            heads, dim_head = config.heads_for(ch)
            return SpatialTransformer(ch, heads, dim_head, depth, config.context_dim, config.use_linear_in_transformer)

        self.time_embed = nn.Sequential(nn.Linear(c, emb_dim), nn.SiLU(), nn.Linear(emb_dim, emb_dim))
        if config.adm_in_channels is not None:
            # The "sequential" label embedding of SGM: Sequential(Sequential(Linear, SiLU, Linear)).
            self.label_emb = nn.Sequential(nn.Sequential(
                nn.Linear(config.adm_in_channels, emb_dim), nn.SiLU(), nn.Linear(emb_dim, emb_dim)))
        self.input_blocks = nn.ModuleList([TimestepBlock(nn.Conv2d(config.in_channels, c, 3, padding=1))])
        skip_channels = [c]
        ch = c
        for level, mult in enumerate(config.channel_mult):
            for r in range(config.num_res_blocks):
                layers: list[nn.Module] = [ResBlock(ch, emb_dim, c * mult)]
                ch = c * mult
                depth = config.transformer_depth[level * config.num_res_blocks + r]
                if depth:
                    layers.append(transformer(ch, depth))
                self.input_blocks.append(TimestepBlock(*layers))
                skip_channels.append(ch)
            if level != levels - 1:
                self.input_blocks.append(TimestepBlock(Downsample(ch)))
                skip_channels.append(ch)
        middle: list[nn.Module] = [ResBlock(ch, emb_dim, ch)]
        if config.transformer_depth_middle:
            middle.append(transformer(ch, config.transformer_depth_middle))
        middle.append(ResBlock(ch, emb_dim, ch))
        self.middle_block = TimestepBlock(*middle)
        self.output_blocks = nn.ModuleList()
        for step, (level, mult) in enumerate(reversed(list(enumerate(config.channel_mult)))):
            for r in range(config.num_res_blocks + 1):
                layers = [ResBlock(ch + skip_channels.pop(), emb_dim, c * mult)]
                ch = c * mult
                depth = config.transformer_depth_output[step * (config.num_res_blocks + 1) + r]
                if depth:
                    layers.append(transformer(ch, depth))
                if level and r == config.num_res_blocks:
                    layers.append(Upsample(ch))
                self.output_blocks.append(TimestepBlock(*layers))
        self.out = nn.Sequential(nn.GroupNorm(32, ch), nn.SiLU(), nn.Conv2d(ch, config.out_channels, 3, padding=1))

    def forward(self, x: torch.Tensor, timesteps: torch.Tensor, context: torch.Tensor,
                y: torch.Tensor | None = None, transformer_options: dict[str, Any] | None = None,
                control: dict[str, list] | None = None) -> torch.Tensor:
        """x [B, in, h, w], timesteps [B], context [B, M, context_dim], y [B, adm] -> [B, out, h, w].

        `transformer_options` carries ComfyUI's patches (`patches`: emb_patch, input_block_patch,
        input_block_patch_after_skip, output_block_patch, forward_timestep_embed_patch and the
        attention patches; `patches_replace`), called where ComfyUI's `openaimodel.UNetModel`
        calls them, with `original_shape`, `transformer_index`, `block` set as there. `control`
        holds ControlNet residuals (`input`/`middle`/`output` lists, consumed by `apply_control`).
        """
        config = self.config
        if (y is None) != (config.adm_in_channels is None):
            raise UNetConfigError(
                f"UNet: y (the ADM/label input) must be given exactly when the model has a label embedding "
                f"(adm_in_channels={config.adm_in_channels}); got {'none' if y is None else tuple(y.shape)}")
        options = dict(transformer_options) if transformer_options else {}
        patches = options.get("patches", {})
        if options:
            options["original_shape"] = list(x.shape)
            options["transformer_index"] = 0
        t_emb = timestep_embedding(timesteps, config.model_channels).to(x.dtype)  # [B, C]
        emb = self.time_embed(t_emb)  # [B, 4C]
        for patch in patches.get("emb_patch", ()):
            emb = patch(emb, config.model_channels, options)
        if y is not None:
            emb = emb + self.label_emb(y.to(emb.dtype))
        context = context.to(x.dtype) if context is not None else None

        hs: list[torch.Tensor] = []
        h = x
        for index, block in enumerate(self.input_blocks):
            if options:
                options["block"] = ("input", index)
            h = block(h, emb, context, options or None)
            h = apply_control(h, control, "input")
            for patch in patches.get("input_block_patch", ()):
                h = patch(h, options)
            hs.append(h)
            for patch in patches.get("input_block_patch_after_skip", ()):
                h = patch(h, options)
        if options:
            options["block"] = ("middle", 0)
        h = self.middle_block(h, emb, context, options or None)
        h = apply_control(h, control, "middle")
        for index, block in enumerate(self.output_blocks):
            if options:
                options["block"] = ("output", index)
            skip = apply_control(hs.pop(), control, "output")
            for patch in patches.get("output_block_patch", ()):
                h, skip = patch(h, skip, options)
            h = torch.cat([h, skip], dim=1)  # [B, C + C_skip, h', w']
            output_shape = tuple(hs[-1].shape) if hs else None
            h = block(h, emb, context, options or None, output_shape)
        return self.out(h.to(x.dtype))
