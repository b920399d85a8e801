"""ComfyUI's `comfy.supported_models` config classes of Flux.1 dev / Kontext, Fill and schnell (its
`supported_models.py`): what `model.model.model_config` is for this family, so packs read
`unet_config`, `latent_format`, `sampling_settings`, `memory_usage_factor` and `isinstance(config,
comfy.supported_models.X)` holds exactly when ComfyUI's would. The family names its class
(`Family.supported_model`); the values are read from the loaded model
(`comfy_core.models.model_config.config_for`)."""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.flux.latent_format import FluxLatentFormat
from comfy_core.models.comfyui_names import comfyui_name
from comfy_core.models.model_config import BASE


@comfyui_name("Flux")
class FluxModelConfig(BASE):
    """Flux.1 dev / Kontext (guidance-distilled)."""

    unet_config = {"image_model": "flux", "guidance_embed": True}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings: dict[str, Any] = {}
    latent_format = FluxLatentFormat
    memory_usage_factor = 3.1
    supported_inference_dtypes = [torch.bfloat16, torch.float16, torch.float32]
    vae_key_prefix = ["vae."]
    text_encoder_key_prefix = ["text_encoders."]


class FluxInpaint(FluxModelConfig):
    """Flux.1 Fill (96 input channels: latent, masked image, packed mask)."""

    unet_config = {"image_model": "flux", "guidance_embed": True, "in_channels": 96}
    supported_inference_dtypes = [torch.bfloat16, torch.float32]


class FluxSchnell(FluxModelConfig):
    """Flux.1 schnell (no guidance embedding; plain rectified-flow sampling, shift 1)."""

    unet_config = {"image_model": "flux", "guidance_embed": False}
    sampling_settings = {"multiplier": 1.0, "shift": 1.0}
