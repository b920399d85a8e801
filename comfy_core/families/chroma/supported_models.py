"""ComfyUI's `comfy.supported_models` config classes of Chroma (its `supported_models.py`): what
`model.model.model_config` is for this family, so packs read `unet_config`, `latent_format`,
`sampling_settings`, `memory_usage_factor` and `isinstance(config, comfy.supported_models.X)` holds
exactly when ComfyUI's would. The family names its class (`Family.supported_model`); the values are
read from the loaded model (`comfy_core.models.model_config.config_for`)."""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.chroma.latent_format import ChromaRadianceLatentFormat
from comfy_core.families.flux.latent_format import FluxLatentFormat
from comfy_core.models.model_config import BASE


class Chroma(BASE):
    """Chroma (Flux-derived, T5-XXL only): model type FLUX, only the multiplier set (shift: 1.15)."""

    unet_config = {"image_model": "chroma"}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings = {"multiplier": 1.0}
    latent_format = FluxLatentFormat
    memory_usage_factor = 3.2
    supported_inference_dtypes = [torch.bfloat16, torch.float16, torch.float32]


class ChromaRadiance(Chroma):
    """Chroma Radiance (pixel space): Chroma's settings, its own latent format and memory factor."""

    unet_config = {"image_model": "chroma_radiance"}
    memory_usage_factor = 0.038
    latent_format = ChromaRadianceLatentFormat
