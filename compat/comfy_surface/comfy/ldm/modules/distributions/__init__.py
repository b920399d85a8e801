"""ComfyUI's `comfy.ldm.modules.distributions` package (efficiency-nodes imports it)."""
from compat.submodules import submodule_attribute

__getattr__ = submodule_attribute(__name__)  # submodules as attributes, as after ComfyUI start-up
