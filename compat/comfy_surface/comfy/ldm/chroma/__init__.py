"""ComfyUI's `comfy.ldm.chroma` package for node packs: the Chroma transformer (`model`) and its
blocks (`layers`), over `comfy_core.families.chroma.dit*`."""
from compat.submodules import submodule_attribute

__getattr__ = submodule_attribute(__name__)  # submodules as attributes, as after ComfyUI start-up
