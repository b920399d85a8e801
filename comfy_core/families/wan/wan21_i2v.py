"""Wan 2.1 image-to-video and first-last-frame-to-video 14 B (and Wan 2.1 Fun inpaint):
ComfyUI's `supported_models.WAN21_I2V` (model_base.WAN21 with image_to_video).

Detected by the CLIP-vision image embedding `img_emb.proj.*` (first-last-frame models also
carry `img_emb.emb_pos` for two images' 514 tokens) and 36 input channels: the noisy latent, a
4-channel frame mask and the 16-channel image latent (zeros when no image is given)."""
from __future__ import annotations

from comfy_core.families.base import Family
from comfy_core.families.wan import supported_models, wan_family
from comfy_core.families.wan.conditions import WanConditions


def definition() -> Family:
    return wan_family("wan21_i2v", "Wan 2.1 image-to-video", (("model_type", "i2v"), ("in_dim", 36)),
                      WanConditions("wan21", image_to_video=True),
                      supported_model=supported_models.WAN21_I2V)
