"""ComfyUI's `comfy.supported_models` config class of Ovis-Image: ComfyUI detects the file as its Flux
model (`image_model` "flux", no guidance embedding), so the config class that answers it is the one
that answers such a `unet_config`: `FluxSchnell` (model type FLOW, shift 1, multiplier 1), and packs'
`isinstance(config, comfy.supported_models.FluxSchnell)` holds as in ComfyUI. (Whether today's
ComfyUI has an Ovis-specific subclass could not be confirmed from its files here: the official
template sets the shift itself with ModelSamplingAuraFlow.)"""
from __future__ import annotations

from comfy_core.families.flux.supported_models import FluxSchnell

OvisImage = FluxSchnell

__all__ = ["OvisImage"]
