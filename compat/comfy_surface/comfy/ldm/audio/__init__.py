"""ComfyUI's `comfy.ldm.audio` package for node packs: Stable Audio's DiT (`dit`), its Oobleck VAE
(`autoencoder`) and number conditioner (`embedders`)."""
from compat.submodules import submodule_attribute

__getattr__ = submodule_attribute(__name__)  # submodules as attributes, as after ComfyUI start-up
