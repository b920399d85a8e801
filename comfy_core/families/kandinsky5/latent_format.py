"""HunyuanVideo 1.0's latent format (ComfyUI's `comfy/latent_formats.py: HunyuanVideo`), which the
Kandinsky 5 video models sample in: `[B, 16, T, h, w]` latents of HunyuanVideo's 8x / 4x causal VAE
(comfy_core/models/hunyuan_video_vae.py), scaled by 0.476986 (diffusers' `AutoencoderKLHunyuanVideo`
`scaling_factor`); no linear preview factors are kept here. The text-to-image model samples in
Flux.1's format (comfy_core/families/flux/latent_format.py)."""
from __future__ import annotations

from dataclasses import dataclass

from comfy_core.models.latent_formats import LatentFormat

HUNYUAN_VIDEO_CHANNELS = 16
HUNYUAN_VIDEO_SCALE = 0.476986


@dataclass(frozen=True)
class HunyuanVideo(LatentFormat):
    """16 channels, `z * 0.476986`, 3-D (video) latents."""

    name: str = "HunyuanVideo"
    channels: int = HUNYUAN_VIDEO_CHANNELS
    scale_factor: float = HUNYUAN_VIDEO_SCALE
    taesd_decoder_name: str | None = "taehv"

    @property
    def latent_dimensions(self) -> int:
        return 3

    @property
    def temporal_downscale_ratio(self) -> int:
        return 4
