"""ComfyUI's `comfy.ldm.lightricks.vocoders` package: LTX-2's vocoders."""
from compat.submodules import submodule_attribute

__getattr__ = submodule_attribute(__name__)
