"""ComfyUI's `comfy.ldm.ace.vae` package: ACE-Step's music DCAE (`music_dcae_pipeline`)."""
from compat.submodules import submodule_attribute

__getattr__ = submodule_attribute(__name__)  # submodules as attributes, as after ComfyUI start-up
