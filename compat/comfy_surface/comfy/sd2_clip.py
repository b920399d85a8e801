"""`comfy.sd2_clip`, ComfyUI's older path of `comfy.text_encoders.sd2_clip` (same classes)."""
from compat.facade import facade

facade(__name__, {
    "SD2ClipHModel": "comfy_core.text_encoders.encoder:SD2ClipHModel",
    "SD2ClipModel": "comfy_core.families.sd2.clip:SD2ClipModel",
    "SD2Tokenizer": "comfy_core.families.sd2.clip:SD2Tokenizer",
    "SD2ClipHTokenizer": "comfy_core.text_encoders.sd_tokenizer:SDTokenizer",
})
