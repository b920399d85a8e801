"""ComfyUI's `comfy.ldm.hunyuan3dv2_1` package for node packs: the Hunyuan3D 2.1 DiT (`hunyuandit`)."""
from compat.submodules import submodule_attribute

__getattr__ = submodule_attribute(__name__)  # submodules as attributes, as after ComfyUI start-up
