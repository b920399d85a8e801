"""Wan 2.1 Fun control (1.3 B / 14 B): ComfyUI's `supported_models.WAN21_FunControl2V`
(model_base.WAN21 without image_to_video).

Detected by the image embedding `img_emb.proj.*` and 48 input channels: the noisy latent and
32 channels of control video + reference latents (WanFunControlToVideo's concat_latent_image)."""
from __future__ import annotations

from comfy_core.families.base import Family
from comfy_core.families.wan import supported_models, wan_family
from comfy_core.families.wan.conditions import WanConditions


def definition() -> Family:
    return wan_family("wan21_fun_control", "Wan 2.1 Fun control", (("model_type", "i2v"), ("in_dim", 48)),
                      WanConditions("wan21", image_to_video=False),
                      supported_model=supported_models.WAN21_FunControl2V)
