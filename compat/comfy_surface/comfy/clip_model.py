"""ComfyUI's `comfy.clip_model` names for node packs: our text tower (`CLIPTextModel`'s role: one
CLIP text transformer) and vision tower (`CLIPVisionModelProjection`'s role, callable with
ComfyUI's `(pixel_values, intermediate_output=...)`)."""
from compat.facade import facade

facade(__name__, {
    "CLIPTextModel": "comfy_core.text_encoders.encoder:ClipTextEncoder",
    "CLIPVisionModelProjection": "comfy_core.clip_vision.model:VisionTower",
})
