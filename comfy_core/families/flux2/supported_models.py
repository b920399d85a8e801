"""ComfyUI's `comfy.supported_models.Flux2` config class (its `supported_models.py`): `image_model`
"flux2", Flux's exponential time shift at 2.02, the Flux.2 latent format, bf16 / fp16 / fp32, model
`model_base.Flux2`; the memory factor scales Flux's 3.1 by 4 and by the width over 2604."""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.flux.supported_models import FluxModelConfig
from comfy_core.families.flux2.latent_format import Flux2LatentFormat
from comfy_core.models.comfyui_names import comfyui_name

FLUX2_SHIFT = 2.02


@comfyui_name("Flux2")
class Flux2ModelConfig(FluxModelConfig):
    """Flux.2 dev and Klein (a subclass of Flux, as ComfyUI's)."""

    unet_config = {"image_model": "flux2"}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings = {"shift": FLUX2_SHIFT}
    latent_format = Flux2LatentFormat
    supported_inference_dtypes = [torch.bfloat16, torch.float16, torch.float32]
    vae_key_prefix = ["vae."]
    text_encoder_key_prefix = ["text_encoders."]

    def __init__(self, unet_config: dict[str, Any]) -> None:
        super().__init__(unet_config)
        self.memory_usage_factor = self.memory_usage_factor * 4.0 * (self.unet_config.get("hidden_size", 2604) / 2604)
