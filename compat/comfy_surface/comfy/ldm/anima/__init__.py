"""ComfyUI's `comfy.ldm.anima` package for node packs: `model`, Anima's DiT (our
comfy_core/families/anima network)."""
from compat.submodules import submodule_attribute

__getattr__ = submodule_attribute(__name__)  # submodules as attributes, as after ComfyUI start-up
