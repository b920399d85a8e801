"""ComfyUI's `comfy.ldm.genmo.joint_model` (Mochi's DiT, not implemented here; compat/ldm_genmo.py)."""
from compat.submodules import submodule_attribute

__getattr__ = submodule_attribute(__name__)  # submodules as attributes, as after ComfyUI start-up
