"""Wan 2.1 Fun camera control: ComfyUI's `supported_models.WAN21_Camera` (model_base.WAN21_Camera).

Detected by the camera adapter `control_adapter.*` with the CLIP-vision image embedding
`img_emb.*` (32 input channels); WanCameraImageToVideo's `camera_conditions` (Plücker
embeddings) go through the adapter."""
from __future__ import annotations

from comfy_core.families.base import Family
from comfy_core.families.wan import supported_models, wan_family
from comfy_core.families.wan.conditions import WanConditions


def definition() -> Family:
    return wan_family("wan21_camera", "Wan 2.1 Fun camera", (("variant", "camera"),),
                      WanConditions("camera", image_to_video=False),
                      supported_model=supported_models.WAN21_Camera, comfy_model_class="WAN21_Camera")
