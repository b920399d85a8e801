"""ComfyUI's `comfy.supported_models.HunyuanVideo` / `HunyuanVideoI2V` / `HunyuanVideoSkyreelsI2V`
config classes: what `model.model.model_config` is for this family (packs read `unet_config`,
`latent_format`, `sampling_settings`, `memory_usage_factor`). All are `model_base` flow models
(ModelType.FLOW) with shift 7."""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.kandinsky5.latent_format import HunyuanVideo as HunyuanVideoFormat
from comfy_core.models.model_config import BASE

HV_SHIFT = 7.0


class HunyuanVideo(BASE):
    """HunyuanVideo 1.0 text-to-video (16 input channels): shift 7."""

    unet_config = {"image_model": "hunyuan_video"}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings = {"shift": HV_SHIFT}
    latent_format = HunyuanVideoFormat
    memory_usage_factor = 1.8
    supported_inference_dtypes = [torch.bfloat16, torch.float32]
    vae_key_prefix = ["vae."]
    text_encoder_key_prefix = ["text_encoders."]


class HunyuanVideoI2V(HunyuanVideo):
    """The I2V release: image latent + inverted mask concatenated (33 input channels)."""

    unet_config = {"image_model": "hunyuan_video", "in_channels": 33}


class HunyuanVideoSkyreelsI2V(HunyuanVideo):
    """SkyReels' I2V: the image latent concatenated (32 input channels)."""

    unet_config = {"image_model": "hunyuan_video", "in_channels": 32}
