"""ComfyUI's `comfy.supported_models.MageFlow` config class: `image_model` "mage_flow", discrete flow
sampling with shift 6 and multiplier 1 (upstream's `FlowMatchEulerDiscreteScheduler(shift=6.0)`,
static), Flux.2's latent format (128 channels at 16x, scale 1, no shift: the Mage-VAE's latents are
anchored to Flux.2's space), text encoder the Qwen3-VL 4B of CLIPLoader type "mage"; model
`model_base.MageFlow` (a `QwenImage` subclass, model type FLOW). The t2i, Turbo and Edit files are
all this class."""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.flux2.latent_format import Flux2LatentFormat
from comfy_core.models.model_config import BASE

MAGE_SHIFT = 6.0
MAGE_MULTIPLIER = 1.0


class MageFlow(BASE):
    """Mage-Flow (t2i, Turbo, Edit, Edit Turbo; int8 ConvRot files)."""

    huggingface_repo = "Comfy-Org/Mage-Flow"
    unet_config = {"image_model": "mage_flow"}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings = {"multiplier": MAGE_MULTIPLIER, "shift": MAGE_SHIFT}
    latent_format = Flux2LatentFormat
    memory_usage_factor = 2.0
    supported_inference_dtypes = [torch.bfloat16, torch.float32]
    vae_key_prefix = ["vae."]
    text_encoder_key_prefix = ["text_encoders."]
