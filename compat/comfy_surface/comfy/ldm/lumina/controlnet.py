"""ComfyUI's `comfy.ldm.lumina.controlnet` for node packs: `ZImage_Control` and
`ZImageControlTransformerBlock` (Alibaba PAI's Z-Image Fun ControlNet), built from ComfyUI's
arguments onto the engine's network (compat/lumina_controlnet.py over
comfy_core/model_patches/zimage_fun.py): a MODEL_PATCH over one is applied by the
ZImageFunControlnet node (Fill-Nodes' FL_ZImageControlNetPatch builds it so)."""
from compat.facade import facade

_C = "compat.lumina_controlnet:"
facade(__name__, {
    "ZImage_Control": _C + "ZImage_Control",
    "ZImageControlTransformerBlock": _C + "ZImageControlTransformerBlock",
    "JointTransformerBlock": "comfy_core.families.zimage.nextdit:JointTransformerBlock",
})
