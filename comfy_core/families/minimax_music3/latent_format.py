"""MiniMax Music 3's latent format (ComfyUI's `comfy.latent_formats` entry for it): the 128-channel,
one-dimensional latent of its DAV (two folded 64-channel streams), 512 samples a frame at 44.1 kHz,
used as it is (scale 1, no shift), no preview factors."""
from __future__ import annotations

from dataclasses import dataclass

from comfy_core.models.latent_formats import LatentFormat

SAMPLE_RATE = 44100
SAMPLES_PER_FRAME = 512


@dataclass(frozen=True)
class MiniMaxMusic3Latent(LatentFormat):
    """`[B, 128, T]` latents (ComfyUI's `latent_dimensions` 1, `temporal_downscale_ratio` 512)."""

    name: str = "MiniMaxMusic3"
    channels: int = 128
    scale_factor: float = 1.0

    @property
    def latent_dimensions(self) -> int:
        return 1

    @property
    def temporal_downscale_ratio(self) -> int:
        return SAMPLES_PER_FRAME


def minimax_music3_latent_format() -> MiniMaxMusic3Latent:
    return MiniMaxMusic3Latent()
