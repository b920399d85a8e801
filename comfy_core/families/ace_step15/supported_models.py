"""ComfyUI's `comfy.supported_models.ACEStep15` config class: what `model.model.model_config` is for
ACE-Step 1.5, so packs read `unet_config` (`audio_model` "ace1.5"), `latent_format`,
`sampling_settings` (flow, shift 3, multiplier 1), `memory_usage_factor` (4.7) and
`isinstance(config, comfy.supported_models.ACEStep15)` holds as in ComfyUI. Its models are
ComfyUI's `model_base.ACEStep15` (model type FLOW)."""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.ace_step15.latent_format import ACEAudio15
from comfy_core.models.model_config import BASE


class ACEStep15(BASE):
    """ACE-Step 1.5: flow (CONST) sampling, shift 3, multiplier 1; the 64-channel audio latent."""

    unet_config = {"audio_model": "ace1.5"}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings = {"multiplier": 1.0, "shift": 3.0}
    latent_format = ACEAudio15
    memory_usage_factor = 4.7
    supported_inference_dtypes = [torch.bfloat16, torch.float32]
    vae_key_prefix = ["vae."]
    text_encoder_key_prefix = ["text_encoders."]
