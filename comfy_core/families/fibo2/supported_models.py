"""A `comfy.supported_models` config class for Fibo 2.0 in ComfyUI's style: `image_model` "fibo2",
Flux's exponential shift 1.15 with multiplier 1 (model type FLUX: `ModelSamplingFlux`), Flux.2's
latent format, text encoder the Qwen3-VL 4B of CLIPLoader type "fibo2".

ComfyUI's own class is not stored anywhere we could read: its name and the sampling are read from
the reference pipeline instead (diffusers' `BriaFibo2Pipeline`: sigmas from 1 to 1 / steps shifted
by Flux's exponential shift `mu`, 1.15 at the trained ~1 MP size of 4096 latent tokens; the network
takes sigma and scales it by 1000 itself). Unverified against ComfyUI."""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.flux2.latent_format import Flux2LatentFormat
from comfy_core.models.model_config import BASE

FIBO2_SHIFT = 1.15
FIBO2_MULTIPLIER = 1.0


class Fibo2(BASE):
    """Fibo 2.0 (Dev, Edit Turbo; bf16 and int8 ConvRot files)."""

    huggingface_repo = "Comfy-Org/Fibo-2.0"
    unet_config = {"image_model": "fibo2"}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings = {"multiplier": FIBO2_MULTIPLIER, "shift": FIBO2_SHIFT}
    latent_format = Flux2LatentFormat
    memory_usage_factor = 2.0
    supported_inference_dtypes = [torch.bfloat16, torch.float16, torch.float32]
    vae_key_prefix = ["vae."]
    text_encoder_key_prefix = ["text_encoders."]
