"""ComfyUI's `comfy.ldm.modules.encoders` package for node packs (submodule: noise_aug_modules)."""
from compat.submodules import submodule_attribute

__getattr__ = submodule_attribute(__name__)  # submodules as attributes, as after ComfyUI start-up
