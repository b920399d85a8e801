"""Chroma Radiance's latent format (ComfyUI's `comfy/latent_formats.py: ChromaRadiance`): the
latent is the image itself, 3 channels in -1..1, no scale or shift; previews show the channels as
RGB. (Chroma itself uses Flux's format, `families/flux/latent_format.py`.)"""
from __future__ import annotations

from dataclasses import dataclass

from comfy_core.models.comfyui_names import comfyui_name
from comfy_core.models.latent_formats import LatentFormat


@comfyui_name("ChromaRadiance")
@dataclass(frozen=True)
class ChromaRadianceLatentFormat(LatentFormat):
    """Pixels as the latent: 3 channels, scale 1, shift 0, identity RGB preview factors."""

    name: str = "ChromaRadiance"
    channels: int = 3
    scale_factor: float = 1.0
    shift_factor: float = 0.0
    latent_rgb_factors: tuple[tuple[float, float, float], ...] = ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0))

    @property
    def spacial_downscale_ratio(self) -> int:
        return 1  # the latent is the image
