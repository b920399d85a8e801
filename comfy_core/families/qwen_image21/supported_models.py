"""ComfyUI's `comfy.supported_models.QwenImage21` config class: what `model.model.model_config` is for
this family, so packs read `unet_config`, `latent_format`, `sampling_settings`, `memory_usage_factor`
and `isinstance(config, comfy.supported_models.QwenImage21)` holds exactly when ComfyUI's would. Its
models are ComfyUI's `model_base.QwenImage21` (model type FLUX)."""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.qwen_image21.latent_format import QwenImage21LatentFormat
from comfy_core.models.model_config import BASE

# ComfyUI: "scheduler mu at 1024x1024 (base 0.5 @ 256 tokens, max 0.9 @ 8192)", as Flux's exponential shift.
QWEN_IMAGE21_SHIFT = 0.69


class QwenImage21(BASE):
    """Qwen-Image 2.1: Flux's exponential shift 0.69, multiplier 1; its own 64-channel latents."""

    unet_config = {"image_model": "qwen_image21"}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings = {"multiplier": 1.0, "shift": QWEN_IMAGE21_SHIFT}
    latent_format = QwenImage21LatentFormat
    memory_usage_factor = 6.0
    supported_inference_dtypes = [torch.bfloat16, torch.float32]
    vae_key_prefix = ["vae."]
    text_encoder_key_prefix = ["text_encoders."]
