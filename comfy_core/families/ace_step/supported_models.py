"""ComfyUI's `comfy.supported_models.ACEStep` config class: what `model.model.model_config` is for
ACE-Step 1, so packs read `unet_config` (`audio_model` "ace"), `latent_format`, `sampling_settings`
(flow, shift 3; ComfyUI's default multiplier 1000), `memory_usage_factor` (0.5) and
`isinstance(config, comfy.supported_models.ACEStep)` holds as in ComfyUI. Its models are
ComfyUI's `model_base.ACEStep` (model type FLOW)."""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.ace_step.latent_format import ACEAudio
from comfy_core.models.model_config import BASE


class ACEStep(BASE):
    """ACE-Step 1: flow (CONST) sampling, shift 3; the 8-channel music DCAE latent."""

    unet_config = {"audio_model": "ace"}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings = {"shift": 3.0}
    latent_format = ACEAudio
    memory_usage_factor = 0.5
    supported_inference_dtypes = [torch.bfloat16, torch.float32]
    vae_key_prefix = ["vae."]
    text_encoder_key_prefix = ["text_encoders."]
