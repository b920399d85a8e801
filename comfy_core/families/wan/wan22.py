"""Wan 2.2 TI2V-5B (text- and image-to-video): ComfyUI's `supported_models.WAN22_T2V`
(model_base.WAN22): 48-channel latents of the Wan 2.2 VAE (16x spatial, 4x temporal), the same
DiT blocks (dim 3072, 30 blocks). Image-to-video puts the image latent into the first latent
frame and a noise mask (Wan22ImageToVideoLatent): the denoise mask makes per-frame timesteps
(0 for the clean first frame), and the masked-out frames are kept clean, not re-noised.

Detected by 48 output channels (`head.head`) and no image embedding."""
from __future__ import annotations

from comfy_core.families.base import Family
from comfy_core.families.wan import supported_models, wan_family
from comfy_core.families.wan.conditions import WanConditions


def definition() -> Family:
    return wan_family("wan22_ti2v", "Wan 2.2 TI2V 5B", (("variant", "ti2v"),),
                      WanConditions("wan22", image_to_video=True), version="22",
                      supported_model=supported_models.WAN22_T2V, comfy_model_class="WAN22")
