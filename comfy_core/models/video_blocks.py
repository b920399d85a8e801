"""The temporal building blocks of Stable Video Diffusion's spatial-temporal UNet.

Blattmann et al. 2023 ("Stable Video Diffusion: Scaling Latent Video Diffusion Models to Large
Datasets", after "Align your Latents", Blattmann et al. 2023): every spatial layer of an image
UNet is followed by a temporal layer over the frame axis, and the two outputs are blended by a
learned factor. Behaviour and parameter names follow ComfyUI's `comfy/ldm/modules/
diffusionmodules/openaimodel.py` (`VideoResBlock`), `attention.py` (`SpatialVideoTransformer`,
`BasicTransformerBlock` with `ff_in`) and `diffusionmodules/util.py` (`AlphaBlender`), which
load the SGM checkpoints unchanged (`time_stack`, `time_mixer.mix_factor`, `time_pos_embed`).
Written here on top of our image blocks (`unet_blocks.ResBlock`, `transformer.SpatialTransformer`
and `BasicTransformerBlock`), which are composed, not changed.

Frames travel in the batch axis, video-major: a batch of `B` videos of `T` frames is
`[B*T, C, H, W]` with row `b*T + t` frame `t` of video `b`.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from comfy_core.models.transformer import BasicTransformerBlock, SpatialTransformer
from comfy_core.models.unet_blocks import ResBlock, group_norm, timestep_embedding

MERGE_STRATEGIES = ("fixed", "learned", "learned_with_images")


def to_video(x: torch.Tensor, frames: int) -> torch.Tensor:
    """`[B*T, C, H, W]` -> `[B, C, T, H, W]`."""
    bt, c, h, w = x.shape
    return x.reshape(bt // frames, frames, c, h, w).movedim(1, 2)


def from_video(x: torch.Tensor) -> torch.Tensor:
    """`[B, C, T, H, W]` -> `[B*T, C, H, W]`."""
    b, c, t, h, w = x.shape
    return x.movedim(2, 1).reshape(b * t, c, h, w)


class AlphaBlender(nn.Module):
    """`alpha * spatial + (1 - alpha) * temporal` with `alpha` a fixed factor (`fixed`, a buffer),
    `sigmoid(mix_factor)` (`learned`), or that except on frames an `image_only_indicator` marks,
    where alpha is 1 and the temporal branch is ignored (`learned_with_images`).

    `layout`: "tokens" blends `[B*T, N, C]` token tensors, "video" `[B, C, T, H, W]` tensors.
    """

    def __init__(self, alpha: float, merge_strategy: str = "learned_with_images", layout: str = "tokens") -> None:
        super().__init__()
        if merge_strategy not in MERGE_STRATEGIES:
            raise ValueError(f"AlphaBlender: merge_strategy must be one of {MERGE_STRATEGIES}, got {merge_strategy!r}")
        if layout not in ("tokens", "video"):
            raise ValueError(f"AlphaBlender: layout must be 'tokens' or 'video', got {layout!r}")
        self.merge_strategy = merge_strategy
        self.layout = layout
        if merge_strategy == "fixed":
            self.register_buffer("mix_factor", torch.tensor([float(alpha)]))
        else:
            self.mix_factor = nn.Parameter(torch.tensor([float(alpha)]))

    def alpha(self, image_only_indicator: torch.Tensor | None, device: torch.device) -> torch.Tensor:
        """The blend factor, broadcastable to the blended tensors."""
        if self.merge_strategy == "fixed":
            return self.mix_factor.to(device)
        alpha = torch.sigmoid(self.mix_factor.to(device))  # [1]
        if self.merge_strategy == "learned" or image_only_indicator is None:
            return alpha.reshape((1,) * (3 if self.layout == "tokens" else 5))
        indicator = image_only_indicator.to(device).bool()  # [B, T]
        alpha = torch.where(indicator, torch.ones_like(alpha), alpha)  # [B, T]
        if self.layout == "tokens":
            return alpha.reshape(-1, 1, 1)  # [(B T), 1, 1]
        return alpha[:, None, :, None, None]  # [B, 1, T, 1, 1]

    def forward(self, x_spatial: torch.Tensor, x_temporal: torch.Tensor,
                image_only_indicator: torch.Tensor | None = None) -> torch.Tensor:
        alpha = self.alpha(image_only_indicator, x_spatial.device)
        return alpha.to(x_spatial.dtype) * x_spatial + (1.0 - alpha).to(x_spatial.dtype) * x_temporal


class TemporalResBlock(nn.Module):
    """A ResBlock of 3-D convolutions whose kernel spans frames only (`(3, 1, 1)`), on
    `[B, C, T, H, W]`; the timestep embedding `[B, T, E]` is added per frame (ComfyUI's
    `ResBlock(dims=3, exchange_temb_dims=True)`), or absent (`emb_channels=None`, the VAE's)."""

    def __init__(self, channels: int, emb_channels: int | None, kernel_size: tuple[int, int, int] = (3, 1, 1)) -> None:
        super().__init__()
        padding = tuple(k // 2 for k in kernel_size)
        self.in_layers = nn.Sequential(group_norm(channels), nn.SiLU(),
                                       nn.Conv3d(channels, channels, kernel_size, padding=padding))
        if emb_channels is not None:
            self.emb_layers = nn.Sequential(nn.SiLU(), nn.Linear(emb_channels, channels))
        self.out_layers = nn.Sequential(group_norm(channels), nn.SiLU(), nn.Dropout(0.0),
                                        nn.Conv3d(channels, channels, kernel_size, padding=padding))

    def forward(self, x: torch.Tensor, emb: torch.Tensor | None = None) -> torch.Tensor:
        h = self.in_layers(x)  # [B, C, T, H, W]
        if emb is not None and hasattr(self, "emb_layers"):
            e = self.emb_layers(emb).to(h.dtype)  # [B, T, C]
            h = h + e.movedim(1, 2)[..., None, None]  # [B, C, T, 1, 1]
        return x + self.out_layers(h)


class VideoResBlock(ResBlock):
    """The image ResBlock per frame, then a `TemporalResBlock` over frames, blended with the
    per-frame result by `time_mixer`."""

    def __init__(self, channels: int, emb_channels: int, out_channels: int, *, merge_factor: float = 0.0,
                 merge_strategy: str = "learned_with_images", kernel_size: tuple[int, int, int] = (3, 1, 1)) -> None:
        super().__init__(channels, emb_channels, 0.0, out_channels=out_channels)
        self.time_stack = TemporalResBlock(out_channels, emb_channels, kernel_size)
        self.time_mixer = AlphaBlender(merge_factor, merge_strategy, layout="video")

    def forward(self, x: torch.Tensor, emb: torch.Tensor, num_video_frames: int = 1,  # type: ignore[override]
                image_only_indicator: torch.Tensor | None = None) -> torch.Tensor:
        # x [B*T, C, H, W], emb [B*T, E]
        x = super().forward(x, emb)
        spatial = to_video(x, num_video_frames)  # [B, C', T, H, W]
        temporal = self.time_stack(spatial, emb.reshape(-1, num_video_frames, emb.shape[-1]))
        return from_video(self.time_mixer(spatial, temporal, image_only_indicator))


class TemporalTransformerBlock(BasicTransformerBlock):
    """A transformer block over the frames of each pixel: a residual GEGLU feed-forward first
    (`norm_in`, `ff_in`), then the image block's self-attention, cross-attention and
    feed-forward (and its patch points, as ComfyUI runs the same class there)."""

    def __init__(self, dim: int, heads: int, dim_head: int, context_dim: int) -> None:
        # ComfyUI's BasicTransformerBlock(ff_in=True): `norm_in`, `ff_in`, residual.
        super().__init__(dim, heads, dim_head, context_dim=context_dim, ff_in=True)


class SpatialVideoTransformer(SpatialTransformer):
    """The image `SpatialTransformer` whose every block is followed by a temporal block over
    frames (with a learned sinusoidal frame-position embedding, `time_pos_embed`), the two
    blended by `time_mixer`. The temporal blocks cross-attend to the first frame's context of
    each video (`use_spatial_context`, as SVD)."""

    def __init__(self, channels: int, heads: int, dim_head: int, depth: int, context_dim: int, use_linear: bool, *,
                 merge_factor: float = 0.0, merge_strategy: str = "learned_with_images",
                 max_time_embed_period: int = 10000) -> None:
        super().__init__(channels, heads, dim_head, depth=depth, context_dim=context_dim, use_linear=use_linear)
        inner = heads * dim_head
        self.max_time_embed_period = max_time_embed_period
        self.time_stack = nn.ModuleList(
            TemporalTransformerBlock(inner, heads, dim_head, context_dim) for _ in range(depth))
        self.time_pos_embed = nn.Sequential(nn.Linear(channels, 4 * channels), nn.SiLU(), nn.Linear(4 * channels, channels))
        self.time_mixer = AlphaBlender(merge_factor, merge_strategy, layout="tokens")

    def forward(self, x: torch.Tensor, context: torch.Tensor | None,  # type: ignore[override]
                transformer_options: dict[str, Any] | None = None, *, time_context: torch.Tensor | None = None,
                num_video_frames: int = 1, image_only_indicator: torch.Tensor | None = None) -> torch.Tensor:
        # x [B*T, C, H, W]; context [B*T, M, ctx]; time_context [B*T, M', ctx] or None (= context)
        bt, c, h, w = x.shape
        frames = num_video_frames
        options = transformer_options if transformer_options is not None else {}
        options["activations_shape"] = [bt, c, h, w]
        x_in = x
        if time_context is None:
            time_context = context
        if time_context is not None:
            # Each video's first-frame context, repeated for each of its pixels: [B*H*W, M', ctx].
            time_context = time_context[::frames].repeat_interleave(h * w, dim=0)
        x = self.norm(x)
        if not self.use_linear:
            x = self.proj_in(x)
        x = x.movedim(1, 3).reshape(bt, h * w, -1)  # [B*T, S, inner or C]
        if self.use_linear:
            x = self.proj_in(x)
        frame_index = torch.arange(frames, device=x.device).repeat(bt // frames)  # [B*T]: 0..T-1 per video
        pos = timestep_embedding(frame_index, self.in_channels, self.max_time_embed_period).to(x.dtype)
        pos = self.time_pos_embed(pos)[:, None, :]  # [B*T, 1, C]
        s, inner = x.shape[1], x.shape[2]
        for index, (block, mix_block) in enumerate(zip(self.transformer_blocks, self.time_stack)):
            options["block_index"] = index
            x = block(x, context, options or None)
            mixed = (x + pos).reshape(bt // frames, frames, s, inner).transpose(1, 2).reshape(-1, frames, inner)
            mixed = mix_block(mixed, time_context, options or None)  # [B*S, T, inner]
            mixed = mixed.reshape(bt // frames, s, frames, inner).transpose(1, 2).reshape(bt, s, inner)
            x = self.time_mixer(x, mixed, image_only_indicator)
        if self.use_linear:
            x = self.proj_out(x)
        x = x.reshape(bt, h, w, -1).movedim(3, 1)  # [B*T, inner or C, H, W]
        if not self.use_linear:
            x = self.proj_out(x)
        return x + x_in
