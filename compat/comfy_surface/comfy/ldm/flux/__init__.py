"""ComfyUI's `comfy.ldm.flux` package for node packs: the Flux.1 transformer (`model`), its blocks
(`layers`) and the shared DiT helpers (`math`), over `comfy_core.families.flux.dit*`."""
from compat.submodules import submodule_attribute

__getattr__ = submodule_attribute(__name__)  # submodules as attributes, as after ComfyUI start-up
