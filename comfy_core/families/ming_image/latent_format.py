"""Ming-Image's latent format (ComfyUI's `comfy/latent_formats.py: MingImage`): the 16-channel video
latents [B, C, T, h, w] of its Wan 2.1-style VAE (8x down, 4x in time), scaled by 8.0064 into the
model's space (no per-channel statistics, no shift), with ComfyUI's linear preview factors."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from comfy_core.models.latent_formats import LatentFormat

_MING_RGB = (
    (0.0028, 0.4359, 1.6986), (-0.3094, -0.3620, -0.0783), (0.9806, 0.5697, 0.1953), (1.0482, 1.0832, 0.4385),
    (0.0648, -0.0981, -0.2756), (0.8954, -0.0321, -0.2461), (-0.8438, -1.0825, -0.4071), (-0.4610, 0.2319, 0.1578),
    (-1.0171, -0.9257, -1.3410), (-0.6377, 0.1949, 0.2250), (0.0362, 0.6733, -0.0450), (-0.0530, 0.3718, 0.7762),
    (-0.9903, 0.2123, 0.4190), (-0.2607, -0.7047, -0.1375), (0.8319, 0.1645, 0.6854), (0.7366, 0.4105, 0.6899),
)


@dataclass(frozen=True)
class MingImage(LatentFormat):
    """16 channels, scale 8.0064, video latents (an image is one frame)."""

    name: str = "MingImage"
    channels: int = 16
    scale_factor: float = 8.0064
    latent_rgb_factors: tuple[tuple[float, float, float], ...] = _MING_RGB
    latent_rgb_factors_bias: tuple[float, float, float] | None = (-0.1048, -0.1049, -0.1874)

    @property
    def latent_dimensions(self) -> int:
        return 3

    @property
    def temporal_downscale_ratio(self) -> int:
        return 4

    def latent_to_rgb(self, latent: torch.Tensor) -> torch.Tensor:
        """Preview of every frame: [B, C, T, h, w] -> RGB [B, T, h, w, 3] (a 4-D latent: [B, h, w, 3])."""
        if latent.ndim == 4:
            return super().latent_to_rgb(latent)
        b, c, t, h, w = latent.shape
        frames = super().latent_to_rgb(latent.transpose(1, 2).reshape(b * t, c, h, w))
        return frames.reshape(b, t, h, w, 3)


__all__ = ["MingImage"]
