"""ComfyUI's `comfy.ldm.omnigen` package for node packs: the OmniGen 2 DiT (`omnigen2`)."""
from compat.submodules import submodule_attribute

__getattr__ = submodule_attribute(__name__)  # submodules as attributes, as after ComfyUI start-up
