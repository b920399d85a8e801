"""Wan 2.2 S2V (speech-to-video, 14B): ComfyUI's `supported_models.WAN22_S2V` (model_base.WAN22_S2V).

Detected by the causal audio encoder (`casual_audio_encoder.encoder.final_linear`, ComfyUI's
marker); the network is comfy_core/families/wan/s2v.py. Its inputs (WanSoundImageToVideo's
conditioning): `audio_embed`, the reference image latent, the motion latents and the control
video latent (`WanConditions("s2v")`). Wan 2.1's latent format (16 channels)."""
from __future__ import annotations

from comfy_core.families.base import Family
from comfy_core.families.wan import supported_models, wan_family
from comfy_core.families.wan.conditions import WanConditions


def definition() -> Family:
    return wan_family("wan22_s2v", "Wan 2.2 S2V", (("variant", "s2v"),), WanConditions("s2v", image_to_video=False),
                      supported_model=supported_models.WAN22_S2V, comfy_model_class="WAN22_S2V")
