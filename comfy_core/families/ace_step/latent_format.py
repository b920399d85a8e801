"""ACE-Step 1's latent format (ComfyUI's `comfy/latent_formats.py: ACEAudio`): the music DCAE's
8-channel latent `[B, 8, 16, T]` (16 mel-band rows; 44.1 kHz audio, 512 samples a mel frame and
8 mel frames a latent column, so 4096 samples each: 44100 / 4096 ~ 10.77 columns a second), used
as it is (scale 1, no shift), no preview factors."""
from __future__ import annotations

from dataclasses import dataclass

from comfy_core.models.latent_formats import LatentFormat

SAMPLE_RATE = 44_100
SAMPLES_PER_COLUMN = 4096  # ComfyUI's VAE upscale / downscale ratio for this VAE
LATENT_ROWS = 16


@dataclass(frozen=True)
class ACEAudio(LatentFormat):
    """`[B, 8, 16, T]` latents (ComfyUI's `latent_dimensions` 2)."""

    name: str = "ACEAudio"
    channels: int = 8
    scale_factor: float = 1.0


def ace_latent_format() -> ACEAudio:
    return ACEAudio()


def latent_columns(seconds: float) -> int:
    """Latent length for `seconds` of audio, ComfyUI's EmptyAceStepLatentAudio rule
    `int(seconds * 44100 / 512 / 8)`."""
    return int(seconds * SAMPLE_RATE / 512 / 8)
