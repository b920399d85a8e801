"""ComfyUI's `comfy.image_encoders.dino2` for node packs: the DINOv2 backbone
(`comfy_core.models.dinov2`, in ComfyUI's key layout; MoGe, Depth Anything 3 and the CLIP-vision
DINOv2 encoders build it)."""
from compat.facade import facade

facade(__name__, {"Dinov2Model": "comfy_core.models.dinov2:Dinov2Model"})
