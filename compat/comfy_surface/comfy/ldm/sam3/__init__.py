"""ComfyUI's `comfy.ldm.sam3` package for node packs: its presence says SAM 3 / 3.1 is supported (our
SAM 3 is comfy_core/models/sam3, loaded by the SAM3 nodes); its submodules are not served."""
from compat.submodules import submodule_attribute

__getattr__ = submodule_attribute(__name__)  # submodules as attributes, as after ComfyUI start-up
