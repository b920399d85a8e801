"""A `comfy.supported_models`-style config class for FLUX 3 Image: what `model.model.model_config`
is for this family (`unet_config`, `latent_format`, `sampling_settings`, ...). ComfyUI's own FLUX 3
module could not be read (no stored ComfyUI commit has it), so the class name "Flux3" and the
memory factor are ours; the sampling settings are BFL's recipe as diffusers' FLUX.3 pipeline
applies it (a constant rectified-flow shift of 6.93, multiplier 1: the network embeds 1000 t itself),
and the latents are Flux.2's (the templates load `flux2-vae.safetensors`)."""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.flux2.latent_format import Flux2LatentFormat
from comfy_core.models.comfyui_names import comfyui_name
from comfy_core.models.model_config import BASE

FLUX3_SHIFT = 6.93  # diffusers' Flux3SetTimestepsStep: the constant shift ("alpha") of the FLUX.3 recipe


@comfyui_name("Flux3")
class Flux3ModelConfig(BASE):
    """FLUX 3 Image (base and step-distilled)."""

    unet_config = {"image_model": "flux3"}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings = {"multiplier": 1.0, "shift": FLUX3_SHIFT}
    latent_format = Flux2LatentFormat
    memory_usage_factor = 3.1
    supported_inference_dtypes = [torch.bfloat16, torch.float16, torch.float32]
    vae_key_prefix = ["vae."]
    text_encoder_key_prefix = ["text_encoders."]
