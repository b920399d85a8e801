"""ComfyUI's `comfy.ldm.qwen_image.controlnet` for node packs: the InstantX Qwen-Image ControlNet
(`comfy_core.controlnet.qwen_image_controlnet`)."""
from compat.facade import facade

facade(__name__, {
    "QwenImageControlNetModel": "comfy_core.controlnet.qwen_image_controlnet:QwenImageControlNetModel",
})
