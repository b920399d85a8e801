"""ComfyUI's `comfy.ldm.minimax` (MiniMax H3, our comfy_core/families/minimax_h3) for node packs."""
from compat.submodules import submodule_attribute

__getattr__ = submodule_attribute(__name__)  # submodules as attributes, as after ComfyUI start-up
