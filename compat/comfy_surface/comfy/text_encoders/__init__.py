"""ComfyUI's `comfy.text_encoders` package for node packs (submodules: sd2_clip, sd3_clip, flux, t5, wan, long_clipl,
spiece_tokenizer, the families' encoder sets such as qwen_image, lumina2 and z_image, ...)."""
from compat.submodules import submodule_attribute

__getattr__ = submodule_attribute(__name__)  # submodules as attributes, as after ComfyUI start-up
