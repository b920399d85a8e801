"""ComfyUI's `comfy.supported_models.JoyImage` config class: `image_model` "joyimage", flow (CONST)
sampling with shift 1.5 and multiplier 1000 (model type FLOW: `ModelSamplingDiscreteFlow`), RoPE base
10000 over 16 / 56 / 56 channels (`unet_extra_config`), Wan 2.1's latents, text encoder the Qwen3-VL 8B
of CLIPLoader type "joyimage"; model `model_base.JoyImage`."""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.wan.latent_format import Wan21
from comfy_core.models.model_config import BASE

JOYIMAGE_SHIFT = 1.5
JOYIMAGE_MULTIPLIER = 1000.0


class JoyImage(BASE):
    """JoyAI-Image-Edit (bf16 and int8 ConvRot files)."""

    huggingface_repo = "Comfy-Org/JoyAI-Image-Edit"
    unet_config = {"image_model": "joyimage"}
    unet_extra_config: dict[str, Any] = {"theta": 10000, "rope_dim_list": [16, 56, 56]}
    sampling_settings = {"multiplier": JOYIMAGE_MULTIPLIER, "shift": JOYIMAGE_SHIFT}
    latent_format = Wan21
    memory_usage_factor = 1.8
    supported_inference_dtypes = [torch.bfloat16, torch.float32]
    vae_key_prefix = ["vae."]
    text_encoder_key_prefix = ["text_encoders."]
