"""ComfyUI's `comfy.ldm.chroma_radiance` package for node packs: Chroma Radiance (`model`)."""
from compat.submodules import submodule_attribute

__getattr__ = submodule_attribute(__name__)  # submodules as attributes, as after ComfyUI start-up
