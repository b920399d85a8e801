"""ComfyUI's `comfy.ldm.hidream` package for node packs: the HiDream-I1 DiT (`model`)."""
from compat.submodules import submodule_attribute

__getattr__ = submodule_attribute(__name__)  # submodules as attributes, as after ComfyUI start-up
