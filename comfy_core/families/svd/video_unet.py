"""Stable Video Diffusion's spatial-temporal UNet (`VideoUNetModel`) and its `VideoConfig`.

Blattmann et al. 2023 ("Stable Video Diffusion: Scaling Latent Video Diffusion Models to Large
Datasets"): the SD 2.1 image UNet (linear projections, 64-channel heads) with every ResBlock a
`VideoResBlock` and every transformer a `SpatialVideoTransformer` (comfy_core/models/
video_blocks.py), an 8-channel input (noisy latent + the conditioning frame's latent) and a
768-wide label embedding of fps, motion bucket and noise augmentation. Parameter names are the
SGM checkpoint's `model.diffusion_model.*` names, as ComfyUI's `openaimodel.UNetModel` with
`use_temporal_resblock` / `use_temporal_attention` builds them; the forward pass follows that
class (`forward_timestep_embed`, `_forward`), including its patch points (`emb_patch`,
`input_block_patch`, `input_block_patch_after_skip`, `output_block_patch`, the transformer
blocks' attention patches), `transformer_options["block"|"block_index"|"transformer_index"|
"original_shape"]`, and ControlNet residuals popped from `control["input"|"middle"|"output"]`.

The structure comes from `UNetConfig.detect_from_weights` (the temporal keys do not change what
it reads); what weights cannot show is `VideoConfig`, with ComfyUI's values for SVD
(`model_detection.py`: learned-with-images merge from 0, `(3, 1, 1)` temporal kernels).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from comfy_core.models.unet import UNetConfig, UNetConfigError
from comfy_core.models.unet_blocks import Downsample, Upsample, timestep_embedding
from comfy_core.models.video_blocks import SpatialVideoTransformer, VideoResBlock


@dataclass(frozen=True)
class VideoConfig:
    """The temporal layers' settings (not visible in weights)."""

    merge_strategy: str = "learned_with_images"
    merge_factor: float = 0.0
    kernel_size: tuple[int, int, int] = (3, 1, 1)
    max_time_embed_period: int = 10000


def _apply_control(h: torch.Tensor, control: dict | None, name: str) -> torch.Tensor:
    """Add the next ControlNet residual for `name` (popped from the end), as ComfyUI's `apply_control`."""
    if control is not None and control.get(name):
        residual = control[name].pop()
        if residual is not None:
            h = h + residual
    return h


class VideoUNetModel(nn.Module):
    """`forward(x [B*T, in, h, w], timesteps [B*T], context [B*T, M, ctx], y [B*T, adm], ...,
    num_video_frames=T) -> [B*T, out, h, w]`."""

    def __init__(self, config: UNetConfig, video: VideoConfig = VideoConfig()) -> None:
        super().__init__()
        self.config = config
        self.video = video
        c = config.model_channels
        emb_dim = 4 * c
        levels = config.levels
        if config.adm_in_channels is None:
            raise UNetConfigError("video UNet: a label embedding (fps, motion bucket, augmentation) is required")

        def resblock(cin: int, cout: int) -> VideoResBlock:
            return VideoResBlock(cin, emb_dim, cout, merge_factor=video.merge_factor,
                                 merge_strategy=video.merge_strategy, kernel_size=video.kernel_size)

        def transformer(ch: int, depth: int) -> SpatialVideoTransformer:
            heads, dim_head = config.heads_for(ch)
            return SpatialVideoTransformer(ch, heads, dim_head, depth, config.context_dim,
                                           config.use_linear_in_transformer, merge_factor=video.merge_factor,
                                           merge_strategy=video.merge_strategy,
                                           max_time_embed_period=video.max_time_embed_period)

        self.time_embed = nn.Sequential(nn.Linear(c, emb_dim), nn.SiLU(), nn.Linear(emb_dim, emb_dim))
        self.label_emb = nn.Sequential(nn.Sequential(
            nn.Linear(config.adm_in_channels, emb_dim), nn.SiLU(), nn.Linear(emb_dim, emb_dim)))
        self.input_blocks = nn.ModuleList([nn.Sequential(nn.Conv2d(config.in_channels, c, 3, padding=1))])
        skip_channels = [c]
        ch = c
        for level, mult in enumerate(config.channel_mult):
            for r in range(config.num_res_blocks):
                layers: list[nn.Module] = [resblock(ch, c * mult)]
                ch = c * mult
                depth = config.transformer_depth[level * config.num_res_blocks + r]
                if depth:
                    layers.append(transformer(ch, depth))
                self.input_blocks.append(nn.Sequential(*layers))
                skip_channels.append(ch)
            if level != levels - 1:
                self.input_blocks.append(nn.Sequential(Downsample(ch)))
                skip_channels.append(ch)
        middle: list[nn.Module] = [resblock(ch, ch)]
        if config.transformer_depth_middle:
            middle.append(transformer(ch, config.transformer_depth_middle))
        middle.append(resblock(ch, ch))
        self.middle_block = nn.Sequential(*middle)
        self.output_blocks = nn.ModuleList()
        for step, (level, mult) in enumerate(reversed(list(enumerate(config.channel_mult)))):
            for r in range(config.num_res_blocks + 1):
                layers = [resblock(ch + skip_channels.pop(), c * mult)]
                ch = c * mult
                depth = config.transformer_depth_output[step * (config.num_res_blocks + 1) + r]
                if depth:
                    layers.append(transformer(ch, depth))
                if level and r == config.num_res_blocks:
                    layers.append(Upsample(ch))
                self.output_blocks.append(nn.Sequential(*layers))
        self.out = nn.Sequential(nn.GroupNorm(32, ch), nn.SiLU(), nn.Conv2d(ch, config.out_channels, 3, padding=1))

    @staticmethod
    def _run_block(block: nn.Sequential, h: torch.Tensor, emb: torch.Tensor, context: torch.Tensor | None,
                   options: dict[str, Any], frames: int, image_only_indicator: torch.Tensor | None,
                   time_context: torch.Tensor | None, output_shape: tuple[int, ...] | None = None) -> torch.Tensor:
        """One block's layers, each fed what it needs (ComfyUI's `forward_timestep_embed`)."""
        for layer in block:
            if isinstance(layer, VideoResBlock):
                h = layer(h, emb, frames, image_only_indicator)
            elif isinstance(layer, SpatialVideoTransformer):
                h = layer(h, context, options, time_context=time_context, num_video_frames=frames,
                          image_only_indicator=image_only_indicator)
                options["transformer_index"] = options.get("transformer_index", 0) + 1
            elif isinstance(layer, Upsample):
                h = layer(h, output_shape)
            else:
                for class_type, handler in options.get("patches", {}).get("forward_timestep_embed_patch", ()):
                    if isinstance(layer, class_type):
                        h = handler(layer, h, emb, context, options, output_shape, time_context, frames,
                                    image_only_indicator)
                        break
                else:
                    h = layer(h)
        return h

    def forward(self, x: torch.Tensor, timesteps: torch.Tensor, context: torch.Tensor | None = None,
                y: torch.Tensor | None = None, control: dict | None = None,
                transformer_options: dict[str, Any] | None = None, *, num_video_frames: int | None = None,
                image_only_indicator: torch.Tensor | None = None,
                time_context: torch.Tensor | None = None) -> torch.Tensor:
        """`num_video_frames` (T) defaults to the whole batch being one video."""
        config = self.config
        if y is None:
            raise UNetConfigError("video UNet: y (the fps / motion bucket / augmentation embedding) is required")
        frames = x.shape[0] if num_video_frames is None else int(num_video_frames)
        if frames < 1 or x.shape[0] % frames:
            raise UNetConfigError(f"video UNet: a batch of {x.shape[0]} rows is not a whole number of "
                                  f"{frames}-frame videos")
        # One options dict for the whole pass, updated in place as ComfyUI does (patches read it).
        options = dict(transformer_options) if transformer_options else {}
        options["original_shape"] = list(x.shape)
        options["transformer_index"] = 0
        patches = options.get("patches", {})
        emb = self.time_embed(timestep_embedding(timesteps, config.model_channels).to(x.dtype))  # [B*T, 4C]
        for patch in patches.get("emb_patch", ()):
            emb = patch(emb, config.model_channels, options)
        emb = emb + self.label_emb(y.to(emb.dtype))
        context = context.to(x.dtype) if context is not None else None
        extra = (options, frames, image_only_indicator, time_context)

        hs: list[torch.Tensor] = []
        h = x
        for index, block in enumerate(self.input_blocks):
            options["block"] = ("input", index)
            h = self._run_block(block, h, emb, context, *extra)
            h = _apply_control(h, control, "input")
            for patch in patches.get("input_block_patch", ()):
                h = patch(h, options)
            hs.append(h)
            for patch in patches.get("input_block_patch_after_skip", ()):
                h = patch(h, options)
        options["block"] = ("middle", 0)
        h = self._run_block(self.middle_block, h, emb, context, *extra)
        h = _apply_control(h, control, "middle")
        for index, block in enumerate(self.output_blocks):
            options["block"] = ("output", index)
            skip = _apply_control(hs.pop(), control, "output")
            for patch in patches.get("output_block_patch", ()):
                h, skip = patch(h, skip, options)
            h = torch.cat([h, skip], dim=1)
            output_shape = tuple(hs[-1].shape) if hs else None
            h = self._run_block(block, h, emb, context, *extra, output_shape)
        return self.out(h.to(x.dtype))
