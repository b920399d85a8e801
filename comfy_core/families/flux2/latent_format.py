"""Flux.2's latent format (ComfyUI's `comfy/latent_formats.py: Flux2`): the VAE's 32 channels in 2x2
patches, 128 channels at 1/16 of the image size, already normalised by the VAE (scale 1, no
shift); previews unpack the patches (channel `4c + 2i + j` is channel `c` at offset `(i, j)`) and
apply 32 x 3 colour factors."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from comfy_core.models.comfyui_names import comfyui_name
from comfy_core.models.latent_formats import LatentFormat

_FLUX2_RGB = (
    (0.0058, 0.0113, 0.0073), (0.0495, 0.0443, 0.0836), (-0.0099, 0.0096, 0.0644), (0.2144, 0.3009, 0.3652),
    (0.0166, -0.0039, -0.0054), (0.0157, 0.0103, -0.0160), (-0.0398, 0.0902, -0.0235), (-0.0052, 0.0095, 0.0109),
    (-0.3527, -0.2712, -0.1666), (-0.0301, -0.0356, -0.0180), (-0.0107, 0.0078, 0.0013), (0.0746, 0.0090, -0.0941),
    (0.0156, 0.0169, 0.0070), (-0.0034, -0.0040, -0.0114), (0.0032, 0.0181, 0.0080), (-0.0939, -0.0008, 0.0186),
    (0.0018, 0.0043, 0.0104), (0.0284, 0.0056, -0.0127), (-0.0024, -0.0022, -0.0030), (0.1207, -0.0026, 0.0065),
    (0.0128, 0.0101, 0.0142), (0.0137, -0.0072, -0.0007), (0.0095, 0.0092, -0.0059), (0.0000, -0.0077, -0.0049),
    (-0.0465, -0.0204, -0.0312), (0.0095, 0.0012, -0.0066), (0.0290, -0.0034, 0.0025), (0.0220, 0.0169, -0.0048),
    (-0.0332, -0.0457, -0.0468), (-0.0085, 0.0389, 0.0609), (-0.0076, 0.0003, -0.0043), (-0.0111, -0.0460, -0.0614),
)
VAE_CHANNELS = 32
PATCH = 2


def unpatchify(latent: torch.Tensor) -> torch.Tensor:
    """`[B, 4c, h, w]` -> `[B, c, 2h, 2w]` (channel `4c + 2i + j` goes to offset `(i, j)`)."""
    b, channels, h, w = latent.shape
    c = channels // (PATCH * PATCH)
    return latent.reshape(b, c, PATCH, PATCH, h, w).permute(0, 1, 4, 2, 5, 3).reshape(b, c, h * PATCH, w * PATCH)


def patchify(latent: torch.Tensor) -> torch.Tensor:
    """`[B, c, H, W]` -> `[B, 4c, H/2, W/2]` (the inverse of `unpatchify`)."""
    b, c, h, w = latent.shape
    return (latent.reshape(b, c, h // PATCH, PATCH, w // PATCH, PATCH).permute(0, 1, 3, 5, 2, 4)
            .reshape(b, c * PATCH * PATCH, h // PATCH, w // PATCH))


@comfyui_name("Flux2")
@dataclass(frozen=True)
class Flux2LatentFormat(LatentFormat):
    """Flux.2: 128 channels (32 x 2x2), 16x down, scale 1 (TAESD previews: `taef2_decoder`)."""

    name: str = "Flux2"
    channels: int = 128
    scale_factor: float = 1.0
    latent_rgb_factors: tuple[tuple[float, float, float], ...] = _FLUX2_RGB
    latent_rgb_factors_bias: tuple[float, float, float] | None = (-0.0329, -0.0718, -0.0851)
    taesd_decoder_name: str | None = "taef2_decoder"

    @property
    def spacial_downscale_ratio(self) -> int:
        return 16  # ComfyUI's: the VAE's 8x and the 2x2 patches

    def latent_rgb_factors_reshape(self, latent: torch.Tensor) -> torch.Tensor:
        """ComfyUI's hook for previews: `[B, 128, h, w]` unpacked to `[B, 32, 2h, 2w]` for the factors."""
        return unpatchify(latent)

    def latent_to_rgb(self, latent: torch.Tensor) -> torch.Tensor:
        """Preview of `[B, 128, h, w]`: the patches unpacked to `[B, 32, 2h, 2w]`, then the factors."""
        return super().latent_to_rgb(unpatchify(latent))
