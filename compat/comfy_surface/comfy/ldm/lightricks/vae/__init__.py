"""ComfyUI's `comfy.ldm.lightricks.vae` package: the LTX-Video causal video VAE's modules."""
from compat.submodules import submodule_attribute

__getattr__ = submodule_attribute(__name__)
