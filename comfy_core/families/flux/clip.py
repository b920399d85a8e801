"""The classes ComfyUI gives Flux.1's CLIP (`clip.cond_stage_model` is the set, `clip.tokenizer` the
tokenizer), which packs check by `isinstance` or by name; the family's `EncoderSetSpec` names them
(`set_class`, `tokenizer_class`)."""
from __future__ import annotations

from comfy_core.text_encoders.encoder_set import TextEncoderSet
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer


class FluxClipModel(TextEncoderSet):
    """Flux's CLIP-L + T5-XXL set (ComfyUI's `comfy.text_encoders.flux.FluxClipModel`)."""


class FluxTokenizer(FamilyTokenizer):
    """Flux's CLIP-L and T5-XXL tokenizers (ComfyUI's `comfy.text_encoders.flux.FluxTokenizer`)."""
