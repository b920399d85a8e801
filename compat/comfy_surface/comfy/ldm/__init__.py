"""ComfyUI's `comfy.ldm` package (model code) for node packs: facades over our modules."""
from compat.submodules import submodule_attribute

__getattr__ = submodule_attribute(__name__)  # submodules as attributes, as after ComfyUI start-up
