"""ComfyUI's `comfy.supported_models` config classes of PixelDiT and PiD: `image_model` "pixeldit" /
"pid", model type FLOW with ModelSamplingDiscreteFlow's multiplier 1000 (the network gets sigma x
1000), shift 4 (PixelDiT's 1024-pixel stage) and 1.5 (PiD's distilled four steps), the pixels as the
latent (3 channels, no VAE: ComfyUI's "pixel_space" VAE converts), the Gemma 2 2B of CLIPLoader
type "pixeldit" as text encoder; models `model_base.PixelDiTT2I` and `model_base.PiD`."""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.chroma.latent_format import ChromaRadianceLatentFormat
from comfy_core.models.model_config import BASE

PIXELDIT_SHIFT = 4.0
PID_SHIFT = 1.5
MULTIPLIER = 1000.0


class PixelDiT(BASE):
    """PixelDiT-1300M text to image."""

    huggingface_repo = "nvidia/PixelDiT-1300M-1024px"
    unet_config = {"image_model": "pixeldit"}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings = {"shift": PIXELDIT_SHIFT}
    latent_format = ChromaRadianceLatentFormat
    memory_usage_factor = 0.04
    supported_inference_dtypes = [torch.bfloat16, torch.float32]
    vae_key_prefix = ["vae."]
    text_encoder_key_prefix = ["text_encoders."]


class PiD(BASE):
    """PiD, the pixel diffusion decoder (a latent to a 4x image in four steps); not a PixelDiT
    subclass, as in ComfyUI."""

    huggingface_repo = "nvidia/PiD"
    unet_config = {"image_model": "pid"}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings = {"shift": PID_SHIFT}
    latent_format = ChromaRadianceLatentFormat
    memory_usage_factor = 0.04
    supported_inference_dtypes = [torch.bfloat16, torch.float32]
    vae_key_prefix = ["vae."]
    text_encoder_key_prefix = ["text_encoders."]
