"""ComfyUI's `comfy.taesd` package for node packs (submodules `taesd`, `taehv`)."""
from compat.submodules import submodule_attribute

__getattr__ = submodule_attribute(__name__)  # submodules as attributes, as after ComfyUI start-up
