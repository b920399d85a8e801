"""ComfyUI's `comfy.supported_models.LTXV` config class: what `model.model.model_config` is for
LTX-Video 0.9.x, so packs read `unet_config`, `latent_format`, `sampling_settings`,
`memory_usage_factor` and `isinstance(config, comfy.supported_models.LTXV)` holds as in ComfyUI."""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.ltxv.latent_format import LTXV as LTXVFormat
from comfy_core.models.model_config import BASE


class LTXV(BASE):
    """LTX-Video: Flux's exponential shift 2.37, bf16 / fp32, memory factor 5.5 x width / 2048."""

    unet_config = {"image_model": "ltxv"}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings = {"shift": 2.37}
    latent_format = LTXVFormat
    memory_usage_factor = 5.5
    supported_inference_dtypes = [torch.bfloat16, torch.float32]
    vae_key_prefix = ["vae."]
    text_encoder_key_prefix = ["text_encoders."]

    def __init__(self, unet_config: dict[str, Any]) -> None:
        super().__init__(unet_config)
        self.memory_usage_factor = (self.unet_config.get("cross_attention_dim", 2048) / 2048) * 5.5  # ComfyUI's rule
