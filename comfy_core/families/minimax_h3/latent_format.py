"""MiniMax H3's latent formats (ComfyUI's `latent_formats.MiniMaxH3Video` and `MiniMaxH3AV`): the
video VAE's latent (24 channels, 16x spatial compression, latent frames standing for 1, 4, 4, 4, 4,
... pixel frames) taken as it is (scale 1, no shift: the VAE normalises per channel itself), with
ComfyUI's linear preview factors; the stereo audio latent (32 channels at 40 Hz) beside it in the
nested [video, audio] latent.

ComfyUI's `MiniMaxH3AV.latent_channels` is 32, the wider stream's (so per-stream slices keep both
whole); `channels` here is the video part's 24, what the sampler's latent check reads of the first
part. `fix_empty_latent` turns an empty video-shaped latent (EmptyLatentImage's, widened) into the
nested one: the first 24 channels as the video, zero audio for as long as its frames last.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from comfy_core.models.latent_formats import LatentFormat

VIDEO_CHANNELS = 24
AUDIO_CHANNELS = 32
AUDIO_LATENT_RATE = 40
SPATIAL = 16
TEMPORAL = 4  # ComfyUI's nominal ratio (the first latent frame stands for one pixel frame)
FRAME_PER_TOKEN = (1, 4, 4, 4, 4)
AUDIO_FRAMES_PER_PIXEL_FRAME = 5.0 / 3.0  # 40 Hz audio latent frames per 24 fps pixel frame

_H3_RGB = (
    (-0.018555, 0.024344, -0.017536), (0.150164, 0.137244, 0.129221), (0.027367, -0.050369, -0.208606),
    (-0.000793, -0.164622, -0.323161), (-0.048556, 0.013970, -0.074286), (0.011740, 0.014172, -0.006906),
    (0.061517, 0.061212, 0.110025), (0.035321, 0.086879, 0.110059), (-0.017426, 0.002997, 0.035356),
    (0.531539, 0.548819, 0.624404), (-0.024968, -0.040234, -0.034302), (-0.032549, -0.029096, -0.017221),
    (0.022609, 0.020286, 0.050661), (-0.084001, -0.038131, -0.020805), (-0.018830, 0.010412, 0.061120),
    (0.020777, 0.011196, -0.030994), (-0.008390, -0.012201, -0.025687), (-0.013281, -0.002924, 0.006331),
    (0.000260, 0.001833, -0.011038), (0.105471, 0.100482, 0.132106), (0.016529, 0.015213, 0.009999),
    (-0.014015, -0.017438, -0.019134), (-0.033787, -0.009984, -0.019725), (0.004224, 0.017284, 0.027196),
)


@dataclass(frozen=True)
class MiniMaxH3AV(LatentFormat):
    """The nested latent's format: its first part (the video) is what checks and previews read."""

    name: str = "MiniMaxH3AV"
    channels: int = VIDEO_CHANNELS
    scale_factor: float = 1.0
    shift_factor: float = 0.0
    latent_rgb_factors: tuple[tuple[float, float, float], ...] = _H3_RGB
    latent_rgb_factors_bias: tuple[float, float, float] | None = (0.057426, -0.022078, -0.071449)
    taesd_decoder_name: str | None = "taeh3"

    @property
    def latent_channels(self) -> int:
        return AUDIO_CHANNELS  # ComfyUI's: the wider of the two streams

    @property
    def latent_dimensions(self) -> int:
        return 3

    @property
    def spacial_downscale_ratio(self) -> int:
        return SPATIAL

    @property
    def temporal_downscale_ratio(self) -> int:
        return TEMPORAL

    def latent_to_rgb(self, latent: torch.Tensor) -> torch.Tensor:
        """Preview of every frame of the video part: `[B, C, T, h, w]` -> RGB `[B, T, h, w, 3]` in 0..1."""
        if latent.ndim == 4:
            return super().latent_to_rgb(latent[:, :VIDEO_CHANNELS])
        b, _, t, h, w = latent.shape
        frames = latent[:, :VIDEO_CHANNELS].transpose(1, 2).reshape(b * t, VIDEO_CHANNELS, h, w)
        return super().latent_to_rgb(frames).reshape(b, t, h, w, 3)

    def fix_empty_latent(self, latent: torch.Tensor) -> object:
        """[B, >= 24, T, h, w] -> the nested [video [B, 24, T, h, w], zero audio [B, 32, 2, frames]],
        `frames` = round(pixel frames x 5 / 3) (ComfyUI's `MiniMaxH3AV.fix_empty_latent`)."""
        from comfy_core.latent.nested import NestedTensor

        if latent.ndim != 5 or latent.shape[1] < VIDEO_CHANNELS:
            raise ValueError(f"MiniMax H3: an empty video latent is [B, >= {VIDEO_CHANNELS}, T, h, w], got "
                             f"{tuple(latent.shape)}")
        video = latent[:, :VIDEO_CHANNELS].clone()
        frames = sum(FRAME_PER_TOKEN[i % len(FRAME_PER_TOKEN)] for i in range(video.shape[2]))
        audio = latent.new_zeros((latent.shape[0], AUDIO_CHANNELS, 2, round(frames * AUDIO_FRAMES_PER_PIXEL_FRAME)))
        return NestedTensor((video, audio))


def minimax_h3_latent_format() -> MiniMaxH3AV:
    return MiniMaxH3AV()
