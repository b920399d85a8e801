"""ComfyUI's `comfy.supported_models.MiniMaxH3` config class: what `model.model.model_config` is for
MiniMax H3, so packs read `unet_config` (`image_model` "minimax_h3"), `latent_format`
(`MiniMaxH3AV`), `sampling_settings` (shift 12, audio shift 3), `memory_usage_factor` (0.114) and
`isinstance(config, comfy.supported_models.MiniMaxH3)` holds as in ComfyUI."""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.minimax_h3.latent_format import MiniMaxH3AV
from comfy_core.models.model_config import BASE


class MiniMaxH3(BASE):
    unet_config = {"image_model": "minimax_h3"}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings = {"shift": 12.0, "audio_shift": 3.0}
    latent_format = MiniMaxH3AV
    memory_usage_factor = 0.114
    supported_inference_dtypes = [torch.bfloat16, torch.float32]
    vae_key_prefix = ["vae."]
    text_encoder_key_prefix = ["text_encoders."]
