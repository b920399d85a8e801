"""ComfyUI's `comfy.supported_models` config classes of the NextDiT families, Lumina 2 and Z-Image
(its `supported_models.py`: `ZImage` subclasses `Lumina2`): what `model.model.model_config` is for
these families, so packs read `unet_config`, `latent_format`, `sampling_settings`,
`memory_usage_factor` and `isinstance(config, comfy.supported_models.X)` holds exactly when
ComfyUI's would. Both are models of ComfyUI's `model_base.Lumina2`."""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.flux.latent_format import FluxLatentFormat
from comfy_core.models.model_config import BASE


class Lumina2(BASE):
    """Lumina-Image 2.0: flow (CONST) sampling with shift 6, multiplier 1; Flux's latents."""

    unet_config = {"image_model": "lumina2", "dim": 2304}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings = {"multiplier": 1.0, "shift": 6.0}
    latent_format = FluxLatentFormat
    memory_usage_factor = 1.4
    supported_inference_dtypes = [torch.bfloat16, torch.float32]
    vae_key_prefix = ["vae."]
    text_encoder_key_prefix = ["text_encoders."]


class ZImage(Lumina2):
    """Z-Image (Turbo, Base): shift 3, multiplier 1."""

    unet_config = {"image_model": "lumina2", "dim": 3840}
    sampling_settings = {"multiplier": 1.0, "shift": 3.0}
    memory_usage_factor = 2.8
    supported_inference_dtypes = [torch.bfloat16, torch.float32]
