"""ComfyUI's `comfy.ldm.hunyuan3d` package for node packs: the Hunyuan3D 2.0 DiT (`model`) and its
ShapeVAE (`vae`) over comfy_core.families.hunyuan3d."""
from compat.submodules import submodule_attribute

__getattr__ = submodule_attribute(__name__)  # submodules as attributes, as after ComfyUI start-up
