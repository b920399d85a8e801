"""The classes ComfyUI gives SD1.x's CLIP (`clip.cond_stage_model` is the set, `clip.tokenizer` the
tokenizer), which packs check by `isinstance` or by name; the family's `EncoderSetSpec` names them
(`set_class`, `tokenizer_class`)."""
from __future__ import annotations

from comfy_core.text_encoders.encoder_set import TextEncoderSet
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer


class SD1ClipModel(TextEncoderSet):
    """SD1.x's CLIP-L set (ComfyUI's `comfy.sd1_clip.SD1ClipModel`)."""

    clip_name, clip = "l", "clip_l"


class SD1Tokenizer(FamilyTokenizer):
    """SD1.x's CLIP-L tokenizer (ComfyUI's `comfy.sd1_clip.SD1Tokenizer`)."""
