"""ComfyUI's `comfy.supported_models.HunyuanVideo15` / `HunyuanVideo15_SR_Distilled` config classes:
what `model.model.model_config` is for this family (packs read `unet_config`, `latent_format`,
`sampling_settings`, `memory_usage_factor`). Both are `model_base` flow models (ModelType.FLOW)."""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.hunyuan_video15.latent_format import HunyuanVideo15 as HunyuanVideo15Format
from comfy_core.models.model_config import BASE

HV15_SHIFT = 7.0
HV15_SR_SHIFT = 2.0


class HunyuanVideo15(BASE):
    """HunyuanVideo 1.5 t2v / i2v (and Capybara, the same network): shift 7."""

    unet_config = {"image_model": "hunyuan_video", "vision_in_dim": 1152}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings = {"shift": HV15_SHIFT}
    latent_format = HunyuanVideo15Format
    memory_usage_factor = 4.0
    supported_inference_dtypes = [torch.float16, torch.bfloat16, torch.float32]
    vae_key_prefix = ["vae."]
    text_encoder_key_prefix = ["text_encoders."]


class HunyuanVideo15_SR_Distilled(BASE):
    """The 1080p super-resolution MeanFlow model (98 input channels): shift 2. Not a subclass of
    HunyuanVideo15, as in ComfyUI (both derive from its HunyuanVideo config)."""

    unet_config = {"image_model": "hunyuan_video", "vision_in_dim": 1152, "in_channels": 98}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings = {"shift": HV15_SR_SHIFT}
    latent_format = HunyuanVideo15Format
    memory_usage_factor = 4.0
    supported_inference_dtypes = [torch.float16, torch.bfloat16, torch.float32]
    vae_key_prefix = ["vae."]
    text_encoder_key_prefix = ["text_encoders."]
