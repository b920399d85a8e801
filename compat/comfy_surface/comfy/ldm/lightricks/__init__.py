"""ComfyUI's `comfy.ldm.lightricks` package for node packs: the LTX-Video DiT (`model`), its
patchifier (`symmetric_patchifier`) and the causal video VAE (`vae`) over `comfy_core.families.ltxv`
and `comfy_core.models.ltxv_vae`."""
from compat.submodules import submodule_attribute

__getattr__ = submodule_attribute(__name__)  # submodules as attributes, as after ComfyUI start-up
