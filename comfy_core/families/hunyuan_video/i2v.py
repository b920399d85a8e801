"""HunyuanVideo 1.0's I2V release (`hunyuan_video_image_to_video_720p_bf16`): 33 input channels, the
latent followed by the image latent and the inverted mask (ComfyUI's `HunyuanVideoI2V`)."""
from __future__ import annotations

from comfy_core.families.base import Family
from comfy_core.families.hunyuan_video import hunyuan_video_family


def definition() -> Family:
    return hunyuan_video_family("i2v")
