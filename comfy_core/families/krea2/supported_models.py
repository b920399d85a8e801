"""ComfyUI's `comfy.supported_models.Krea2` config class: `image_model` "krea2", Flux's exponential
shift 1.15 with multiplier 1 (model type FLUX: `ModelSamplingFlux`), Wan 2.1's latents (the
Qwen-Image VAE), text encoder the Qwen3-VL 4B of CLIPLoader type "krea2"; model `model_base.Krea2`."""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.wan.latent_format import Wan21
from comfy_core.models.model_config import BASE

KREA2_SHIFT = 1.15
KREA2_MULTIPLIER = 1.0


class Krea2(BASE):
    """Krea 2 (Raw, Turbo; bf16, fp8-scaled, int8 ConvRot files)."""

    huggingface_repo = "Comfy-Org/Krea-2"
    unet_config = {"image_model": "krea2"}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings = {"multiplier": KREA2_MULTIPLIER, "shift": KREA2_SHIFT}
    latent_format = Wan21
    memory_usage_factor = 2.2
    supported_inference_dtypes = [torch.bfloat16, torch.float16, torch.float32]
    vae_key_prefix = ["vae."]
    text_encoder_key_prefix = ["text_encoders."]
