"""ComfyUI's `comfy.image_encoders` package for node packs: the DINOv2 image encoder (`dino2`)."""
from compat.submodules import submodule_attribute

__getattr__ = submodule_attribute(__name__)  # submodules as attributes, as after ComfyUI start-up
