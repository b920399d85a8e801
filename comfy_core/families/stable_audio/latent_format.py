"""Stable Audio's latent formats (ComfyUI's `comfy.latent_formats.StableAudio1` / `StableAudio3`): 64
channels of 2048 samples (Open 1.0) or 256 channels of 4096 samples (SA3) at 44.1 kHz, one axis, no
scale or shift; no RGB preview factors."""
from __future__ import annotations

from dataclasses import dataclass

from comfy_core.models.latent_formats import LatentFormat


@dataclass(frozen=True)
class StableAudio1(LatentFormat):
    name: str = "StableAudio1"
    channels: int = 64
    scale_factor: float = 1.0

    @property
    def latent_dimensions(self) -> int:
        return 1

    @property
    def temporal_downscale_ratio(self) -> int:
        return 2048  # samples per latent frame


@dataclass(frozen=True)
class StableAudio3(LatentFormat):
    name: str = "StableAudio3"
    channels: int = 256
    scale_factor: float = 1.0

    @property
    def latent_dimensions(self) -> int:
        return 1

    @property
    def temporal_downscale_ratio(self) -> int:
        return 4096  # samples per latent frame
