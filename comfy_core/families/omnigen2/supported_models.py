"""ComfyUI's `comfy.supported_models.Omnigen2` config class: what `model.model.model_config` is for
this family, so packs read `unet_config`, `latent_format`, `sampling_settings`,
`memory_usage_factor` and `isinstance(config, comfy.supported_models.Omnigen2)` holds exactly when
ComfyUI's would. Its models are ComfyUI's `model_base.Omnigen2` (model type FLOW)."""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.flux.latent_format import FluxLatentFormat
from comfy_core.models.model_config import BASE


class Omnigen2(BASE):
    """OmniGen2: flow (CONST) sampling with shift 2.6, multiplier 1; Flux's latents."""

    unet_config = {"image_model": "omnigen2"}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings = {"multiplier": 1.0, "shift": 2.6}
    latent_format = FluxLatentFormat
    memory_usage_factor = 1.95
    supported_inference_dtypes = [torch.bfloat16, torch.float32]
    vae_key_prefix = ["vae."]
    text_encoder_key_prefix = ["text_encoders."]
