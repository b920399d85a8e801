"""ComfyUI's `comfy.supported_models.Anima` config class: what `model.model.model_config` is for
this family, so packs read `unet_config`, `latent_format`, `sampling_settings`,
`memory_usage_factor` and `isinstance(config, comfy.supported_models.Anima)` holds exactly when
ComfyUI's would. Its models are ComfyUI's `model_base.Anima` (model type FLOW)."""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.wan.latent_format import Wan21
from comfy_core.models.model_config import BASE


class Anima(BASE):
    """Anima: rectified flow, shift 3, multiplier 1; Wan 2.1's latents (the Qwen-Image VAE)."""

    unet_config = {"image_model": "anima"}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings = {"multiplier": 1.0, "shift": 3.0}
    latent_format = Wan21
    memory_usage_factor = 0.95  # ComfyUI: (model_channels / 2048) * 0.95, 1.4x more in fp16
    supported_inference_dtypes = [torch.bfloat16, torch.float16, torch.float32]
    vae_key_prefix = ["vae."]
    text_encoder_key_prefix = ["text_encoders."]
