"""SDXL's latent format (4 channels, scale 0.13025: Podell et al. 2023) and ComfyUI's preview factors
(`comfy/latent_formats.py: SDXL`)."""
from __future__ import annotations

from dataclasses import dataclass

from comfy_core.models.latent_formats import LatentFormat


_SDXL_RGB = ((0.3651, 0.4232, 0.4341), (-0.2533, -0.0042, 0.1068),
             (0.1076, 0.1111, -0.0362), (-0.3165, -0.2492, -0.2188))


@dataclass(frozen=True)
class SDXL(LatentFormat):
    """SDXL (base and refiner): 4 channels, scale 0.13025."""

    name: str = "SDXL"
    channels: int = 4
    scale_factor: float = 0.13025
    latent_rgb_factors: tuple[tuple[float, float, float], ...] = _SDXL_RGB
    latent_rgb_factors_bias: tuple[float, float, float] | None = (0.1084, -0.0175, -0.0011)
    taesd_decoder_name: str | None = "taesdxl_decoder"


def sdxl_latent_format() -> LatentFormat:
    """SDXL (base and refiner): 4 channels, scale 0.13025."""
    return SDXL()
