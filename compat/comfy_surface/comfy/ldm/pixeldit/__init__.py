"""ComfyUI's `comfy.ldm.pixeldit` (PixelDiT / PiD, our comfy_core/families/pixeldit) for node packs."""
from compat.submodules import submodule_attribute

__getattr__ = submodule_attribute(__name__)  # submodules as attributes, as after ComfyUI start-up
