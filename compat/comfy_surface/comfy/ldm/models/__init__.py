"""ComfyUI's `comfy.ldm.models` package for node packs."""
from compat.submodules import submodule_attribute

__getattr__ = submodule_attribute(__name__)  # submodules as attributes, as after ComfyUI start-up
