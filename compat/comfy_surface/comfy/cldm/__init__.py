"""ComfyUI's `comfy.cldm` package (ControlNet networks) for node packs."""
from compat.submodules import submodule_attribute

__getattr__ = submodule_attribute(__name__)  # submodules as attributes, as after ComfyUI start-up
