"""ACE-Step 1.5's latent format (ComfyUI's `comfy/latent_formats.py: ACEAudio15`): the 64-channel,
one-dimensional latent of its 48 kHz stereo VAE (25 latent frames a second, 1920 samples each),
used as it is (scale 1, no shift), no preview factors."""
from __future__ import annotations

from dataclasses import dataclass

from comfy_core.models.latent_formats import LatentFormat

SAMPLE_RATE = 48_000
SAMPLES_PER_FRAME = 1920


@dataclass(frozen=True)
class ACEAudio15(LatentFormat):
    """`[B, 64, T]` latents (ComfyUI's `latent_dimensions` 1)."""

    name: str = "ACEAudio15"
    channels: int = 64
    scale_factor: float = 1.0

    @property
    def latent_dimensions(self) -> int:
        return 1

    @property
    def temporal_downscale_ratio(self) -> int:
        return 1764  # ComfyUI's figure (44.1 kHz / 25), which packs read


def ace15_latent_format() -> ACEAudio15:
    return ACEAudio15()
