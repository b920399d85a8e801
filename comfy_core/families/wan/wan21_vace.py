"""Wan 2.1 VACE (1.3 B / 14 B, all-in-one video creation and editing): ComfyUI's
`supported_models.WAN21_Vace` (model_base.WAN21_Vace).

Detected by `vace_patch_embedding` and `vace_blocks.N`: hint blocks over the control frames,
masks and reference images WanVaceToVideo gives (`vace_frames`, `vace_mask`, `vace_strength`)."""
from __future__ import annotations

from comfy_core.families.base import Family
from comfy_core.families.wan import supported_models, wan_family
from comfy_core.families.wan.conditions import WanConditions


def definition() -> Family:
    return wan_family("wan21_vace", "Wan 2.1 VACE", (("variant", "vace"),),
                      WanConditions("vace", image_to_video=False),
                      supported_model=supported_models.WAN21_Vace, comfy_model_class="WAN21_Vace")
