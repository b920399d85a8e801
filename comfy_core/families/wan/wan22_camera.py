"""Wan 2.2 Fun camera control: ComfyUI's `supported_models.WAN22_Camera` (model_base.WAN21_Camera).

Detected by the camera adapter `control_adapter.*` without an image embedding (36 input channels)."""
from __future__ import annotations

from comfy_core.families.base import Family
from comfy_core.families.wan import supported_models, wan_family
from comfy_core.families.wan.conditions import WanConditions


def definition() -> Family:
    return wan_family("wan22_camera", "Wan 2.2 Fun camera", (("variant", "camera_2.2"),),
                      WanConditions("camera", image_to_video=False),
                      supported_model=supported_models.WAN22_Camera, comfy_model_class="WAN21_Camera")
