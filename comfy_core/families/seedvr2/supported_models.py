"""ComfyUI's `comfy.supported_models.SeedVR2` config class: `image_model` "seedvr2", rectified
flow (model type FLOW, `model_base.SeedVR2`) with shift 1 and multiplier 1000 (the network gets
sigma x 1000, 1000 at the one step the templates take), SeedVR2's latent format, no text encoder
(the positive / negative text embeddings are buffers of the diffusion-model file)."""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.seedvr2.latent_format import SeedVR2LatentFormat
from comfy_core.models.model_config import BASE

SEEDVR2_SHIFT = 1.0
SEEDVR2_MULTIPLIER = 1000.0


class SeedVR2(BASE):
    """SeedVR2 3B and 7B."""

    huggingface_repo = "ByteDance-Seed/SeedVR2-3B"
    unet_config = {"image_model": "seedvr2"}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings = {"multiplier": SEEDVR2_MULTIPLIER, "shift": SEEDVR2_SHIFT}
    latent_format = SeedVR2LatentFormat
    memory_usage_factor = 2.0
    supported_inference_dtypes = [torch.bfloat16, torch.float16, torch.float32]
    vae_key_prefix = ["vae."]
    text_encoder_key_prefix = ["text_encoders."]
