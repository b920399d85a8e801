"""The classes ComfyUI gives SD3 / SD3.5's CLIP (`clip.cond_stage_model` is the set, `clip.tokenizer` the
tokenizer), which packs check by `isinstance` or by name; the family's `EncoderSetSpec` names them
(`set_class`, `tokenizer_class`)."""
from __future__ import annotations

from comfy_core.text_encoders.encoder_set import TextEncoderSet
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer


class SD3ClipModel(TextEncoderSet):
    """SD3's CLIP-L + CLIP-G + T5-XXL set, any of them optional (ComfyUI's
    `comfy.text_encoders.sd3_clip.SD3ClipModel`)."""


class SD3Tokenizer(FamilyTokenizer):
    """SD3's CLIP-L, CLIP-G and T5-XXL tokenizers (ComfyUI's `comfy.text_encoders.sd3_clip.SD3Tokenizer`)."""
