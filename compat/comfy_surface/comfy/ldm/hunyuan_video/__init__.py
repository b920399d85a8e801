"""ComfyUI's `comfy.ldm.hunyuan_video` package for node packs: the HunyuanVideo DiT (`model`) and the
HunyuanVideo 1.5 / HunyuanImage VAEs (`vae`, `vae_refiner`) over comfy_core's."""
from compat.submodules import submodule_attribute

__getattr__ = submodule_attribute(__name__)  # submodules as attributes, as after ComfyUI start-up
