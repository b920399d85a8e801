"""The classes ComfyUI gives SD2.x's CLIP (`clip.cond_stage_model` is the set, `clip.tokenizer` the
tokenizer), which packs check by `isinstance` or by name; the family's `EncoderSetSpec` names them
(`set_class`, `tokenizer_class`)."""
from __future__ import annotations

from comfy_core.text_encoders.encoder_set import TextEncoderSet
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer


class SD2ClipModel(TextEncoderSet):
    """SD2.x's OpenCLIP ViT-H set (ComfyUI's `comfy.sd2_clip.SD2ClipModel`)."""

    clip_name, clip = "h", "clip_h"


class SD2Tokenizer(FamilyTokenizer):
    """SD2.x's ViT-H tokenizer (ComfyUI's `comfy.sd2_clip.SD2Tokenizer`)."""
