"""ComfyUI's `comfy.ldm.seedvr` (SeedVR2, our comfy_core/families/seedvr2) for node packs."""
from compat.submodules import submodule_attribute

__getattr__ = submodule_attribute(__name__)  # submodules as attributes, as after ComfyUI start-up
