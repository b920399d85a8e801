"""ComfyUI's `comfy.supported_models.Kandinsky5` / `Kandinsky5Image` config classes: what
`model.model.model_config` is for this family (packs read `unet_config`, `latent_format`,
`sampling_settings`, `memory_usage_factor`). Both are `model_base` flow models (ModelType.FLOW); the
image class derives from the video one, as in ComfyUI."""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.flux.latent_format import FluxLatentFormat
from comfy_core.families.kandinsky5.latent_format import HunyuanVideo
from comfy_core.models.model_config import BASE

KANDINSKY5_SHIFT = 10.0
KANDINSKY5_IMAGE_SHIFT = 3.0


class Kandinsky5(BASE):
    """The video models (Lite / Pro, t2v and i2v): HunyuanVideo latents."""

    unet_config = {"image_model": "kandinsky5"}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings = {"shift": KANDINSKY5_SHIFT}
    latent_format = HunyuanVideo
    memory_usage_factor = 1.25
    supported_inference_dtypes = [torch.bfloat16, torch.float32]
    vae_key_prefix = ["vae."]
    text_encoder_key_prefix = ["text_encoders."]


class Kandinsky5Image(Kandinsky5):
    """The text-to-image model: Flux.1 latents, no image-latent / mask channels."""

    unet_config = {"image_model": "kandinsky5", "model_dim": 2560, "visual_embed_dim": 64}
    sampling_settings = {"shift": KANDINSKY5_IMAGE_SHIFT}
    latent_format = FluxLatentFormat
