"""HunyuanVideo 1.5's latent format (ComfyUI's `comfy/latent_formats.py: HunyuanVideo15`): video latents
`[B, 32, T, h, w]` of its 16x / 4x causal VAE, scaled by 1.03682; no linear preview factors (ComfyUI
previews it with its tiny autoencoder only)."""
from __future__ import annotations

from dataclasses import dataclass

from comfy_core.models.latent_formats import LatentFormat

HV15_CHANNELS = 32
HV15_SCALE = 1.03682
HV15_DOWNSCALE = 16


@dataclass(frozen=True)
class HunyuanVideo15(LatentFormat):
    """32 channels, `z * 1.03682`, 16x spatial and 4x temporal compression."""

    name: str = "HunyuanVideo15"
    channels: int = HV15_CHANNELS
    scale_factor: float = HV15_SCALE
    spacial_downscale_ratio: int = HV15_DOWNSCALE  # ComfyUI's attribute name and spelling

    @property
    def latent_dimensions(self) -> int:
        return 3

    @property
    def temporal_downscale_ratio(self) -> int:
        return 4

