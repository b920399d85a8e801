"""SkyReels V1's HunyuanVideo I2V: 32 input channels, the latent followed by the image latent
(ComfyUI's `HunyuanVideoSkyreelsI2V`)."""
from __future__ import annotations

from comfy_core.families.base import Family
from comfy_core.families.hunyuan_video import hunyuan_video_family


def definition() -> Family:
    return hunyuan_video_family("skyreels_i2v")
