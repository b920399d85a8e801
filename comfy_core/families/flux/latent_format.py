"""Flux.1's latent format (16 channels, shift 0.1159 then scale 0.3611; ComfyUI's
`comfy/latent_formats.py: Flux`), a subclass of SD3's as in ComfyUI; Chroma uses it too."""
from __future__ import annotations

from dataclasses import dataclass

from comfy_core.families.sd3.latent_format import SD3
from comfy_core.models.comfyui_names import comfyui_name
from comfy_core.models.latent_formats import LatentFormat


_FLUX_RGB = (
    (-0.0346, 0.0244, 0.0681), (0.0034, 0.0210, 0.0687), (0.0275, -0.0668, -0.0433), (-0.0174, 0.0160, 0.0617),
    (0.0859, 0.0721, 0.0329), (0.0004, 0.0383, 0.0115), (0.0405, 0.0861, 0.0915), (-0.0236, -0.0185, -0.0259),
    (-0.0245, 0.0250, 0.1180), (0.1008, 0.0755, -0.0421), (-0.0515, 0.0201, 0.0011), (0.0428, -0.0012, -0.0036),
    (0.0817, 0.0765, 0.0749), (-0.1264, -0.0522, -0.1103), (-0.0280, -0.0881, -0.0499), (-0.1262, -0.0982, -0.0778),
)


# A subclass of SD3, as ComfyUI's `Flux(SD3)`, so a pack's `isinstance(fmt, SD3)` answers alike;
# ComfyUI's name `Flux` (its `__name__`, and `comfy.latent_formats.Flux` in compat).
@comfyui_name("Flux")
@dataclass(frozen=True)
class FluxLatentFormat(SD3):
    """Flux.1 (dev, schnell, Kontext): 16 channels, shift 0.1159 then scale 0.3611 (TAESD
    previews: `taef1_decoder`)."""

    name: str = "Flux"
    channels: int = 16
    scale_factor: float = 0.3611
    shift_factor: float = 0.1159
    latent_rgb_factors: tuple[tuple[float, float, float], ...] = _FLUX_RGB
    latent_rgb_factors_bias: tuple[float, float, float] | None = (-0.0329, -0.0718, -0.0851)
    taesd_decoder_name: str | None = "taef1_decoder"


def flux_latent_format() -> LatentFormat:
    """Flux.1: 16 channels, shift 0.1159, scale 0.3611."""
    return FluxLatentFormat()
