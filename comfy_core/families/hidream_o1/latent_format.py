"""HiDream-O1's latent format (ComfyUI's `HiDreamO1Pixel`): the image itself, 3 channels in -1..1,
no scale or shift, identity RGB previews -- Chroma Radiance's pixel format under its own name."""
from __future__ import annotations

from dataclasses import dataclass

from comfy_core.families.chroma.latent_format import ChromaRadianceLatentFormat
from comfy_core.models.comfyui_names import comfyui_name


@comfyui_name("HiDreamO1Pixel")
@dataclass(frozen=True)
class HiDreamO1PixelLatentFormat(ChromaRadianceLatentFormat):
    name: str = "HiDreamO1Pixel"
