"""ComfyUI's `comfy.supported_models.QwenImage` config class: what `model.model.model_config` is for
this family, so packs read `unet_config`, `latent_format`, `sampling_settings`,
`memory_usage_factor` and `isinstance(config, comfy.supported_models.QwenImage)` holds exactly
when ComfyUI's would. Its models are ComfyUI's `model_base.QwenImage` (model type FLUX)."""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.wan.latent_format import Wan21
from comfy_core.models.model_config import BASE


class QwenImage(BASE):
    """Qwen-Image (and Edit): Flux's exponential shift 1.15, multiplier 1; Wan 2.1's latents."""

    unet_config = {"image_model": "qwen_image"}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings = {"multiplier": 1.0, "shift": 1.15}
    latent_format = Wan21
    memory_usage_factor = 1.8
    supported_inference_dtypes = [torch.bfloat16, torch.float32]
    vae_key_prefix = ["vae."]
    text_encoder_key_prefix = ["text_encoders."]
