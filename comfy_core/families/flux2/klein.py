"""FLUX.2 Klein (4B / 9B): Flux.2's transformer without the guidance embedding, conditioned on
Qwen3 4B / 8B's stacked block outputs (CLIPLoader type "flux2"; clip.py)."""
from __future__ import annotations

from comfy_core.families.base import Family
from comfy_core.families.flux2 import flux2_family
from comfy_core.families.flux2.clip import KLEIN_TEXT_ENCODERS


def definition() -> Family:
    return flux2_family("flux2_klein", "Flux.2 Klein", guidance=False, text_encoders=KLEIN_TEXT_ENCODERS)
