"""SD3's latent format: the 16-channel autoencoder's latents shifted then scaled (Esser et al. 2024,
sec. 5.2.1; ComfyUI's `comfy/latent_formats.py: SD3`). Flux's format derives from it."""
from __future__ import annotations

from dataclasses import dataclass

from comfy_core.models.latent_formats import LatentFormat


_SD3_RGB = (
    (-0.0922, -0.0175, 0.0749), (0.0311, 0.0633, 0.0954), (0.1994, 0.0927, 0.0458), (0.0856, 0.0339, 0.0902),
    (0.0587, 0.0272, -0.0496), (-0.0006, 0.1104, 0.0309), (0.0978, 0.0306, 0.0427), (-0.0042, 0.1038, 0.1358),
    (-0.0194, 0.0020, 0.0669), (-0.0488, 0.0130, -0.0268), (0.0922, 0.0988, 0.0951), (-0.0278, 0.0524, -0.0542),
    (0.0332, 0.0456, 0.0895), (-0.0069, -0.0030, -0.0810), (-0.0596, -0.0465, -0.0293), (-0.1448, -0.1463, -0.1189),
)


@dataclass(frozen=True)
class SD3(LatentFormat):
    """SD3 / SD3.5: 16 channels, shift 0.0609 then scale 1.5305 (TAESD previews: `taesd3_decoder`)."""

    name: str = "SD3"
    channels: int = 16
    scale_factor: float = 1.5305
    shift_factor: float = 0.0609
    latent_rgb_factors: tuple[tuple[float, float, float], ...] = _SD3_RGB
    latent_rgb_factors_bias: tuple[float, float, float] | None = (0.2394, 0.2135, 0.1925)
    taesd_decoder_name: str | None = "taesd3_decoder"


def sd3_latent_format() -> LatentFormat:
    """SD3 / SD3.5: 16 channels, shift 0.0609, scale 1.5305."""
    return SD3()
