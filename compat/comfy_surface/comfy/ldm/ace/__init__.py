"""ComfyUI's `comfy.ldm.ace` package for node packs: the ACE-Step 1 DiT (`model`), its lyric encoder and
music DCAE (`vae`)."""
from compat.submodules import submodule_attribute

__getattr__ = submodule_attribute(__name__)  # submodules as attributes, as after ComfyUI start-up
