"""HunyuanVideo 1.0's latent format (ComfyUI's `comfy/latent_formats.py: HunyuanVideo`), which the
Kandinsky 5 video models sample in: `[B, 16, T, h, w]` latents of HunyuanVideo's 8x / 4x causal VAE
(comfy_core/models/hunyuan_video_vae.py), scaled by 0.476986 (diffusers' `AutoencoderKLHunyuanVideo`
`scaling_factor`); live previews use ComfyUI's linear RGB factors for it (a calibration of the
16 channels to RGB, so the previews match ComfyUI's) or its TAEHV decoder. The text-to-image
model samples in Flux.1's format (comfy_core/families/flux/latent_format.py)."""
from __future__ import annotations

from dataclasses import dataclass

from comfy_core.models.latent_formats import LatentFormat

HUNYUAN_VIDEO_CHANNELS = 16
HUNYUAN_VIDEO_SCALE = 0.476986
# ComfyUI's `latent_rgb_factors` / `_bias` for HunyuanVideo (one row per latent channel).
_RGB = ((-0.0395, -0.0331, 0.0445), (0.0696, 0.0795, 0.0518), (0.0135, -0.0945, -0.0282),
        (0.0108, -0.0250, -0.0765), (-0.0209, 0.0032, 0.0224), (-0.0804, -0.0254, -0.0639),
        (-0.0991, 0.0271, -0.0669), (-0.0646, -0.0422, -0.0400), (-0.0696, -0.0595, -0.0894),
        (-0.0799, -0.0208, -0.0375), (0.1166, 0.1627, 0.0962), (0.1165, 0.0432, 0.0407),
        (-0.2315, -0.1920, -0.1355), (-0.0270, 0.0401, -0.0821), (-0.0616, -0.0997, -0.0727),
        (0.0249, -0.0469, -0.1703))


@dataclass(frozen=True)
class HunyuanVideo(LatentFormat):
    """16 channels, `z * 0.476986`, 3-D (video) latents."""

    name: str = "HunyuanVideo"
    channels: int = HUNYUAN_VIDEO_CHANNELS
    scale_factor: float = HUNYUAN_VIDEO_SCALE
    latent_rgb_factors: tuple[tuple[float, float, float], ...] = _RGB
    latent_rgb_factors_bias: tuple[float, float, float] | None = (0.0259, -0.0192, -0.0761)
    taesd_decoder_name: str | None = "taehv"

    @property
    def latent_dimensions(self) -> int:
        return 3

    @property
    def temporal_downscale_ratio(self) -> int:
        return 4
