"""SeedVR2's latent format (ComfyUI's `latent_formats.SeedVR2`): video latents [B, 16, T, h, w] at
8x spatial, 4x temporal (4n + 1 frames -> n + 1), scale 1 and no shift: the VAE applies the
release's scaling factor 0.9152 itself (comfy_core/models/seedvr2_vae.py), so the LATENT the VAE
encodes is already the network's space, which SeedVR2Conditioning hands to the model unchanged."""
from __future__ import annotations

from dataclasses import dataclass

from comfy_core.models.latent_formats import LatentFormat


@dataclass(frozen=True)
class SeedVR2LatentFormat(LatentFormat):
    name: str = "SeedVR2"
    channels: int = 16
    scale_factor: float = 1.0

    @property
    def latent_dimensions(self) -> int:
        return 3

    @property
    def temporal_downscale_ratio(self) -> int:
        return 4


__all__ = ["SeedVR2LatentFormat"]
