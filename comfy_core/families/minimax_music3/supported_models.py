"""ComfyUI's `comfy.supported_models.MiniMaxMusic3` config class: what `model.model.model_config` is
for MiniMax Music 3, so packs read `unet_config` (`audio_model` "minimax_music3"), `latent_format`,
`sampling_settings` (flow, shift 1, multiplier 1: the network turns sigma into its time `1 - sigma`)
and `isinstance(config, comfy.supported_models.MiniMaxMusic3)` holds as in ComfyUI. Its models are
ComfyUI's `model_base.MiniMaxMusic3` (model type FLOW)."""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.minimax_music3.latent_format import MiniMaxMusic3Latent
from comfy_core.models.model_config import BASE

SHIFT = 1.0
MULTIPLIER = 1.0


class MiniMaxMusic3(BASE):
    """MiniMax Music 3 (fp16, fp32 and int8 ConvRot DiT files)."""

    huggingface_repo = "Comfy-Org/MiniMax-Music-3"
    unet_config = {"audio_model": "minimax_music3"}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings = {"multiplier": MULTIPLIER, "shift": SHIFT}
    latent_format = MiniMaxMusic3Latent
    memory_usage_factor = 2.0
    supported_inference_dtypes = [torch.float16, torch.bfloat16, torch.float32]
    vae_key_prefix = ["vae."]
    text_encoder_key_prefix = ["text_encoders."]
