"""Wan HuMo (1.7B / 17B, text + reference image + audio to video): ComfyUI's
`supported_models.WAN21_HuMo` (model_base.WAN21_HuMo).

Detected by the audio projection (`audio_proj.audio_proj_glob_1.layer.bias`, ComfyUI's marker); the
network is comfy_core/families/wan/humo.py. Its inputs (WanHuMoImageToVideo's conditioning):
`audio_embed` and the reference image latent (`WanConditions("humo")`). Wan 2.1's latent format."""
from __future__ import annotations

from comfy_core.families.base import Family
from comfy_core.families.wan import supported_models, wan_family
from comfy_core.families.wan.conditions import WanConditions


def definition() -> Family:
    return wan_family("wan21_humo", "Wan HuMo", (("variant", "humo"),), WanConditions("humo", image_to_video=False),
                      supported_model=supported_models.WAN21_HuMo, comfy_model_class="WAN21_HuMo")
