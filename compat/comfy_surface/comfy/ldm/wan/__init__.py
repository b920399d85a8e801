"""ComfyUI's `comfy.ldm.wan` package for node packs: the Wan 2.1 / 2.2 video DiT (`model`) over
`comfy_core.families.wan.dit*`."""
from compat.submodules import submodule_attribute

__getattr__ = submodule_attribute(__name__)  # submodules as attributes, as after ComfyUI start-up
