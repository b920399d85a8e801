"""ComfyUI's `comfy.text_encoders.sd2_clip` for node packs: our SD2 (OpenCLIP ViT-H) classes."""
from compat.facade import facade

facade(__name__, {
    "SD2ClipHModel": "comfy_core.text_encoders.encoder:SD2ClipHModel",
    "SD2ClipModel": "comfy_core.families.sd2.clip:SD2ClipModel",
    "SD2Tokenizer": "comfy_core.families.sd2.clip:SD2Tokenizer",
    "SD2ClipHTokenizer": "comfy_core.text_encoders.sd_tokenizer:SDTokenizer",
})
