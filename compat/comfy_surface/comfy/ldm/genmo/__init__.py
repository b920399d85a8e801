"""ComfyUI's `comfy.ldm.genmo` (Mochi): a family this engine does not implement; its classes are
importable stand-ins (compat/ldm_genmo.py)."""
from compat.submodules import submodule_attribute

__getattr__ = submodule_attribute(__name__)  # submodules as attributes, as after ComfyUI start-up
