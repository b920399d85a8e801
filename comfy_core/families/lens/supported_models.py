"""ComfyUI's `comfy.supported_models.Lens` config class (its `supported_models.py`): `image_model`
"lens", model type FLUX (`ModelSamplingFlux`) with shift 1.829 (ComfyUI's mu for 1440x1440 and any
longer sequence), Flux.2's latent format, bf16 / fp32 (fp16 gives NaNs), memory factor 4, text encoder
GPT-OSS 20B (CLIPLoader type "lens"); model `model_base.Lens`."""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.flux2.latent_format import Flux2LatentFormat
from comfy_core.models.comfyui_names import comfyui_name
from comfy_core.models.model_config import BASE

LENS_SHIFT = 1.829
LENS_MULTIPLIER = 1.0


@comfyui_name("Lens")
class LensModelConfig(BASE):
    """Microsoft Lens (3.8B dual-stream MMDiT, GPT-OSS-20B text features, Flux.2 VAE)."""

    huggingface_repo = "Comfy-Org/Lens"
    unet_config = {"image_model": "lens"}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings = {"shift": LENS_SHIFT}
    latent_format = Flux2LatentFormat
    memory_usage_factor = 4.0
    supported_inference_dtypes = [torch.bfloat16, torch.float32]
    vae_key_prefix = ["vae."]
    text_encoder_key_prefix = ["text_encoders."]
