"""Wan 2.2 A14B image-to-video (high- and low-noise experts) and the Wan 2.2 Fun models: a
text-to-video DiT with extra input channels and no CLIP-vision embedding. ComfyUI has no class of
its own for them: its `WAN21_T2V` (model_base.WAN21 without image_to_video) takes them.

Detected by 16 output channels, more than 16 input channels (A14B i2v: 36, the 4-channel mask and
the 16-channel image latent) and no `img_emb`; a `ref_conv` (Fun control's reference image) is
read when present."""
from __future__ import annotations

from comfy_core.families.base import Family
from comfy_core.families.wan import wan_family
from comfy_core.families.wan.conditions import WanConditions


def definition() -> Family:
    return wan_family("wan22_i2v", "Wan 2.2 A14B image-to-video / Fun", (("variant", "fun"),),
                      WanConditions("wan21", image_to_video=False))
