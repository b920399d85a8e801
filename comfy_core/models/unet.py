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

from comfy_core import extension_points
from comfy_core.models.transformer import SpatialTransformer
from comfy_core.models.unet_blocks import (Downsample, ResBlock, TimestepBlock, Upsample, operations_or_default,
                                          timestep_embedding)
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


def forward_timestep_embed(ts: nn.Module, x: torch.Tensor, emb: torch.Tensor, context: Any = None,
                           transformer_options: dict[str, Any] | None = None, output_shape: Any = None,
                           time_context: Any = None, num_video_frames: Any = None,
                           image_only_indicator: Any = None) -> torch.Tensor:
    """Run the layers of `ts` on `x`, feeding each what it takes, as ComfyUI's
    `openaimodel.forward_timestep_embed`: `TimestepBlock`s (ResBlocks) get `emb`, spatial
    transformers the context and options (and the running `transformer_index` goes up by one
    each), an `Upsample` the skip's `output_shape`; any other layer of a class listed in
    `patches["forward_timestep_embed_patch"]` runs that handler instead.

    The UNet calls it through `run_timestep_embed`, so a node pack that replaces
    `comfy.ldm.modules.diffusionmodules.openaimodel.forward_timestep_embed` (Advanced-ControlNet's
    reference-only does; compat makes it `ExtensionPoints.forward_timestep_embed`) runs in our
    UNet instead."""
    options = {} if transformer_options is None else transformer_options
    for layer in ts:
        if isinstance(layer, TimestepBlock):
            x = layer(x, emb)
        elif isinstance(layer, SpatialTransformer):
            x = layer(x, context, transformer_options)
            if "transformer_index" in options:
                options["transformer_index"] += 1
        elif isinstance(layer, Upsample):
            x = layer(x, output_shape)
        else:
            handler = _embed_patch(layer, options)
            if handler is not None:
                x = handler(layer, x, emb, context, transformer_options, output_shape, time_context,
                            num_video_frames, image_only_indicator)
            else:
                x = layer(x)
    return x


def run_timestep_embed(ts: nn.Module, *args: Any, **kwargs: Any) -> torch.Tensor:
    """`forward_timestep_embed`, or the replacement the extension points in force name
    (`ExtensionPoints.forward_timestep_embed`), looked up at every call."""
    override = extension_points.current().forward_timestep_embed
    return (forward_timestep_embed if override is None else override)(ts, *args, **kwargs)


def run_apply_control(h: torch.Tensor, control: dict[str, list] | None, name: str) -> torch.Tensor:
    """`apply_control`, or the replacement the extension points in force name
    (`ExtensionPoints.apply_control`), looked up at every call."""
    override = extension_points.current().apply_control
    return (apply_control if override is None else override)(h, control, name)


class TimestepEmbedSequential(nn.Sequential, TimestepBlock):
    """A sequence of ResBlock / SpatialTransformer / Down- or Upsample, each fed what it needs
    (by `run_timestep_embed`: ours, or the extension points' replacement)."""

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:  # type: ignore[override]
        return run_timestep_embed(self, *args, **kwargs)


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
    """The text-conditioned UNet: `forward(x, timesteps, context, y=None) -> model output`.

    Built from a `UNetConfig`, or from ComfyUI's keyword arguments (`model_channels=...,
    transformer_depth=..., ...`, see `config_from_comfy_kwargs`), with `operations` (the layer
    classes, e.g. a node pack's `comfy.ops` subclass), `dtype` and `device` as ComfyUI's."""

    def __init__(self, config: UNetConfig | None = None, *, operations: Any = None, dtype: Any = None,
                 device: Any = None, **comfy_kwargs: Any) -> None:
        super().__init__()
        if config is None:
            config = config_from_comfy_kwargs(comfy_kwargs)
        elif comfy_kwargs:
            raise UNetConfigError(f"UNet: pass a UNetConfig or ComfyUI's keyword arguments, not both "
                                  f"(got {sorted(comfy_kwargs)})")
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device, "operations": ops}
        layer = {"dtype": dtype, "device": device}
        self.config = config
        self.dtype = dtype if dtype is not None else torch.float32
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
            return SpatialTransformer(ch, heads, dim_head, depth=depth, context_dim=config.context_dim,
                                      use_linear=config.use_linear_in_transformer, **factory)

        def resblock(cin: int, cout: int) -> ResBlock:
            return ResBlock(cin, emb_dim, 0.0, out_channels=cout, **factory)

        self.time_embed = nn.Sequential(ops.Linear(c, emb_dim, **layer), nn.SiLU(), ops.Linear(emb_dim, emb_dim, **layer))
        if config.adm_in_channels is not None:
            # The "sequential" label embedding of SGM: Sequential(Sequential(Linear, SiLU, Linear)).
            self.label_emb = nn.Sequential(nn.Sequential(
                ops.Linear(config.adm_in_channels, emb_dim, **layer), nn.SiLU(), ops.Linear(emb_dim, emb_dim, **layer)))
        self.input_blocks = nn.ModuleList([TimestepEmbedSequential(
            ops.conv_nd(2, config.in_channels, c, 3, padding=1, **layer))])
        skip_channels = [c]
        ch = c
        for level, mult in enumerate(config.channel_mult):
            for r in range(config.num_res_blocks):
                layers: list[nn.Module] = [resblock(ch, c * mult)]
                ch = c * mult
                depth = config.transformer_depth[level * config.num_res_blocks + r]
                if depth:
                    layers.append(transformer(ch, depth))
                self.input_blocks.append(TimestepEmbedSequential(*layers))
                skip_channels.append(ch)
            if level != levels - 1:
                self.input_blocks.append(TimestepEmbedSequential(Downsample(ch, True, **factory)))
                skip_channels.append(ch)
        middle: list[nn.Module] = [resblock(ch, ch)]
        if config.transformer_depth_middle:
            middle.append(transformer(ch, config.transformer_depth_middle))
        middle.append(resblock(ch, ch))
        self.middle_block = TimestepEmbedSequential(*middle)
        self.output_blocks = nn.ModuleList()
        for step, (level, mult) in enumerate(reversed(list(enumerate(config.channel_mult)))):
            for r in range(config.num_res_blocks + 1):
                layers = [resblock(ch + skip_channels.pop(), c * mult)]
                ch = c * mult
                depth = config.transformer_depth_output[step * (config.num_res_blocks + 1) + r]
                if depth:
                    layers.append(transformer(ch, depth))
                if level and r == config.num_res_blocks:
                    layers.append(Upsample(ch, True, **factory))
                self.output_blocks.append(TimestepEmbedSequential(*layers))
        self.out = nn.Sequential(ops.GroupNorm(32, ch, **layer), nn.SiLU(),
                                 ops.conv_nd(2, ch, config.out_channels, 3, padding=1, **layer))

    # ComfyUI's attribute names for the structure (packs read them).
    @property
    def model_channels(self) -> int:
        return self.config.model_channels

    @property
    def in_channels(self) -> int:
        return self.config.in_channels

    @property
    def out_channels(self) -> int:
        return self.config.out_channels

    @property
    def channel_mult(self) -> tuple[int, ...]:
        return self.config.channel_mult

    @property
    def num_classes(self) -> str | None:
        return None if self.config.adm_in_channels is None else "sequential"

    @property
    def adm_in_channels(self) -> int | None:
        return self.config.adm_in_channels

    def _forward(self, x: torch.Tensor, timesteps: torch.Tensor | None = None, context: torch.Tensor | None = None,
                 y: torch.Tensor | None = None, control: dict[str, list] | None = None,
                 transformer_options: dict[str, Any] | None = None, **kwargs: Any) -> torch.Tensor:
        """ComfyUI's `UNetModel._forward` (its positional order: `control` before
        `transformer_options`), the network without the DIFFUSION_MODEL wrappers, which our
        `DiffusionModel` runs: packs that replace `forward` on a subclass call it (ComfyUI-NAG's
        `NAGUNetModel`). Always this class's `forward`, never an instance's replacement."""
        return UNetModel.forward(self, x, timesteps, context, y=y, transformer_options=transformer_options,
                                 control=control, **kwargs)

    def forward(self, x: torch.Tensor, timesteps: torch.Tensor, context: torch.Tensor,
                y: torch.Tensor | None = None, transformer_options: dict[str, Any] | None = None,
                control: dict[str, list] | None = None, **kwargs: Any) -> torch.Tensor:
        """x [B, in, h, w], timesteps [B], context [B, M, context_dim], y [B, adm] -> [B, out, h, w].
        Other keyword arguments (model inputs of other architectures) are ignored, as ComfyUI's
        `UNetModel.forward` does.

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
        # A copy per call, written in place below as ComfyUI writes its per-call options.
        options = dict(transformer_options) if transformer_options else {}
        patches = options.get("patches", {})
        options["original_shape"] = list(x.shape)
        options["transformer_index"] = 0
        t_emb = timestep_embedding(timesteps, config.model_channels).to(x.dtype)  # [B, C]
        emb = self.time_embed(t_emb)  # [B, 4C]
        for patch in patches.get("emb_patch", ()):
            emb = patch(emb, config.model_channels, options)
        if y is not None:
            emb = emb + self.label_emb(y.to(emb.dtype))
        context = context.to(x.dtype) if context is not None else None

        # Blocks run through `run_timestep_embed` and `run_apply_control`: ours, or what the
        # extension points in force name (a node pack's replacement, through compat).
        hs: list[torch.Tensor] = []
        h = x
        for index, block in enumerate(self.input_blocks):
            options["block"] = ("input", index)
            h = run_timestep_embed(block, h, emb, context, options)
            h = run_apply_control(h, control, "input")
            for patch in patches.get("input_block_patch", ()):
                h = patch(h, options)
            hs.append(h)
            for patch in patches.get("input_block_patch_after_skip", ()):
                h = patch(h, options)
        options["block"] = ("middle", 0)
        h = run_timestep_embed(self.middle_block, h, emb, context, options)
        h = run_apply_control(h, control, "middle")
        for index, block in enumerate(self.output_blocks):
            options["block"] = ("output", index)
            skip = run_apply_control(hs.pop(), control, "output")
            for patch in patches.get("output_block_patch", ()):
                h, skip = patch(h, skip, options)
            h = torch.cat([h, skip], dim=1)  # [B, C + C_skip, h', w']
            output_shape = tuple(hs[-1].shape) if hs else None
            h = run_timestep_embed(block, h, emb, context, options, output_shape)
        return self.out(h.to(x.dtype))


# ComfyUI UNetModel arguments that do not change the SD1/SD2/SDXL structure built here.
_COMFY_IGNORED = {"image_size", "dropout", "conv_resample", "use_checkpoint", "num_heads_upsample", "legacy",
                  "use_new_attention_order", "use_spatial_transformer", "n_embed", "disable_middle_attention",
                  "attn_precision", "default_num_video_frames"}
# Arguments accepted only at their ComfyUI default (value given): other values are an error.
_COMFY_DEFAULTS: dict[str, Any] = {"dims": 2, "use_scale_shift_norm": False, "resblock_updown": False,
                                   "disable_self_attentions": None, "num_attention_blocks": None,
                                   "use_temporal_resblock": False, "use_temporal_attention": False,
                                   "extra_ff_mix_layer": False, "video_kernel_size": None}


def config_from_comfy_kwargs(kwargs: Mapping[str, Any]) -> UNetConfig:
    """A `UNetConfig` from ComfyUI's `UNetModel(**unet_config)` keyword arguments (the dicts in
    `comfy/supported_models.py` and `model_detection.py`): `transformer_depth` per input res
    block (or one int for all), `transformer_depth_output`, `transformer_depth_middle`,
    `num_classes` None or "sequential" (with `adm_in_channels`). Options this UNet does not
    build are a `UNetConfigError` naming them."""
    kw = dict(kwargs)
    for name in _COMFY_IGNORED:
        kw.pop(name, None)
    required = ("in_channels", "model_channels", "out_channels", "num_res_blocks")
    missing = [n for n in required if n not in kw]
    if missing:
        raise UNetConfigError(f"UNet: ComfyUI arguments lack {missing}")
    nrb = kw.pop("num_res_blocks")
    channel_mult = tuple(kw.pop("channel_mult", (1, 2, 4, 8)))
    if isinstance(nrb, (list, tuple)):
        if len(set(nrb)) != 1:
            raise UNetConfigError(f"UNet: a different number of res blocks per level is not built here ({nrb})")
        nrb = nrb[0]
    depth = kw.pop("transformer_depth", None)
    depth_middle = kw.pop("transformer_depth_middle", None)
    depth_output = kw.pop("transformer_depth_output", None)
    if not isinstance(depth, (list, tuple)) or not isinstance(depth_output, (list, tuple)) or depth_middle is None:
        # ComfyUI's UNetModel needs these lists too (it pops from them); its configs always give them.
        raise UNetConfigError("UNet: ComfyUI arguments need transformer_depth and transformer_depth_output "
                              "lists and transformer_depth_middle")
    num_classes = kw.pop("num_classes", None)
    adm = kw.pop("adm_in_channels", None)
    if num_classes not in (None, "sequential"):
        raise UNetConfigError(f"UNet: num_classes={num_classes!r} (class or continuous labels) is not built here; "
                              f"only None or 'sequential' (SDXL's ADM embedding)")
    if num_classes is None:
        adm = None
    bad = {n: kw[n] for n, d in _COMFY_DEFAULTS.items() if n in kw and kw[n] != d}
    for n in _COMFY_DEFAULTS:
        kw.pop(n, None)
    config_kw = {n: kw.pop(n) for n in ("in_channels", "model_channels", "out_channels", "context_dim",
                                          "use_linear_in_transformer", "num_heads", "num_head_channels") if n in kw}
    bad.update(kw)
    if bad:
        raise UNetConfigError(f"UNet: ComfyUI arguments not supported by this UNet: {sorted(bad)}")
    if isinstance(config_kw.get("context_dim"), (list, tuple)):
        config_kw["context_dim"] = config_kw["context_dim"][0]
    return UNetConfig(num_res_blocks=nrb, channel_mult=channel_mult, transformer_depth=tuple(depth),
                      transformer_depth_output=tuple(depth_output), transformer_depth_middle=int(depth_middle),
                      adm_in_channels=adm, **config_kw)
