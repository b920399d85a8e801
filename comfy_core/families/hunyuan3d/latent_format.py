"""Hunyuan3D's latent formats (ComfyUI's `comfy.latent_formats.Hunyuan3Dv2`, `Hunyuan3Dv2mini`,
`Hunyuan3Dv2_1`): 64 channels of shape tokens on one axis, a scale factor per release, no shift,
no RGB preview."""
from __future__ import annotations

from dataclasses import dataclass

from comfy_core.models.latent_formats import LatentFormat


@dataclass(frozen=True)
class Hunyuan3Dv2(LatentFormat):
    name: str = "Hunyuan3Dv2"
    channels: int = 64
    scale_factor: float = 0.9990943042622529

    @property
    def latent_dimensions(self) -> int:
        return 1


@dataclass(frozen=True)
class Hunyuan3Dv2mini(Hunyuan3Dv2):
    name: str = "Hunyuan3Dv2mini"
    scale_factor: float = 1.0188137142395404


@dataclass(frozen=True)
class Hunyuan3Dv2_1(Hunyuan3Dv2):
    name: str = "Hunyuan3Dv2_1"
    scale_factor: float = 1.0039506158752403
