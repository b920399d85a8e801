"""ComfyUI's `comfy.supported_models.HiDream` config class: what `model.model.model_config` is for
this family, so packs read `unet_config`, `latent_format`, `sampling_settings` and
`isinstance(config, comfy.supported_models.HiDream)` holds exactly when ComfyUI's would. Its
models are ComfyUI's `model_base.HiDream` (model type FLOW)."""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.flux.latent_format import FluxLatentFormat
from comfy_core.models.model_config import BASE


class HiDream(BASE):
    """HiDream-I1 / E1: ModelSamplingDiscreteFlow's defaults (ComfyUI's class sets `shift` 3.0 and
    then replaces `sampling_settings` by an empty dict: shift 1, multiplier 1000); Flux's latents."""

    unet_config = {"image_model": "hidream"}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings: dict[str, Any] = {}
    latent_format = FluxLatentFormat
    supported_inference_dtypes = [torch.bfloat16, torch.float32]
    vae_key_prefix = ["vae."]
    text_encoder_key_prefix = ["text_encoders."]
