"""ComfyUI's `comfy.ldm.qwen_image` package for node packs: the Qwen-Image DiT (`model`) and its
InstantX ControlNet (`controlnet`) over comfy_core's."""
from compat.submodules import submodule_attribute

__getattr__ = submodule_attribute(__name__)  # submodules as attributes, as after ComfyUI start-up
