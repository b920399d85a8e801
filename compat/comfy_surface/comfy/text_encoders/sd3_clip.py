"""ComfyUI's `comfy.text_encoders.sd3_clip` names for node packs (Easy-Use imports them at load).

SD3's text encoders (CLIP-L + CLIP-G + T5-XXL) are not a family here: the classes exist so the
import and `isinstance` checks work (always False), and constructing one raises
`UnsupportedTextEncoderError` naming what is missing (compat/files_clip.py).
"""
from compat.facade import facade

facade(__name__, {
    "SD3ClipModel": "compat.files_clip:SD3ClipModel",
    "SD3Tokenizer": "compat.files_clip:SD3Tokenizer",
    "T5XXLModel": "compat.files_clip:T5XXLModel",
    "T5XXLTokenizer": "compat.files_clip:T5XXLTokenizer",
})
