"""ComfyUI's `comfy.supported_models.ErnieImage` config class (its `supported_models.py`):
`image_model` "ernie", discrete flow sampling with shift 3 and multiplier 1000, Flux.2's latent
format, bf16 / fp32, memory factor 10, text encoder `ministral3_3b`; model `model_base.ErnieImage`
(model type FLOW)."""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.flux2.latent_format import Flux2LatentFormat
from comfy_core.models.model_config import BASE

ERNIE_SHIFT = 3.0
ERNIE_MULTIPLIER = 1000.0


class ErnieImage(BASE):
    """ERNIE-Image (and Turbo)."""

    huggingface_repo = "baidu/ERNIE-Image"
    unet_config = {"image_model": "ernie"}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings = {"multiplier": ERNIE_MULTIPLIER, "shift": ERNIE_SHIFT}
    latent_format = Flux2LatentFormat
    memory_usage_factor = 10.0
    supported_inference_dtypes = [torch.bfloat16, torch.float32]
    vae_key_prefix = ["vae."]
    text_encoder_key_prefix = ["text_encoders."]
