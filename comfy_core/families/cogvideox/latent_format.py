"""CogVideoX's latent format (ComfyUI's `comfy/latent_formats.py: CogVideoX`): 16-channel video latents
`[B, 16, T, h, w]` at 8x spatial and 4x temporal compression from the CogVideoX VAE, scaled by the
diffusers VAE config's `scaling_factor`: 1.15258426 for CogVideoX 2B, 0.7 for the 5B class (5B,
1.5, CogVideoX-Fun and VOID), which ComfyUI picks from the network."""
from __future__ import annotations

from dataclasses import dataclass

from comfy_core.models.latent_formats import LatentFormat

SCALE_2B = 1.15258426
SCALE_5B = 0.7


@dataclass(frozen=True)
class CogVideoX(LatentFormat):
    name: str = "CogVideoX"
    channels: int = 16
    scale_factor: float = SCALE_5B

    @property
    def latent_dimensions(self) -> int:
        return 3

    @property
    def temporal_downscale_ratio(self) -> int:
        return 4


def cogvideox_latent_format(scale_factor: float = SCALE_5B) -> CogVideoX:
    return CogVideoX(scale_factor=scale_factor)
