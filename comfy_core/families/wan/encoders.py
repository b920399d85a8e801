"""Wan's text-encoder set (ComfyUI 0.3.64's `comfy/text_encoders/wan.py`): the one umT5-XXL tower
`umt5xxl` (comfy_core/text_encoders/umt5.py), loaded by CLIPLoader type "wan", with ComfyUI's
class names for the set and its tokenizer (`WanT5Model`, `WanT5Tokenizer`)."""
from __future__ import annotations

from typing import Any

from comfy_core.text_encoders.encoder_set import PAD_ZERO, EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer
from comfy_core.text_encoders.t5_config import UMT5_SLOT
from comfy_core.text_encoders.umt5 import UMT5_MIN_LENGTH, UMT5_WIDTH


class WanT5Model(TextEncoderSet):
    """Wan's text-encoder set (ComfyUI's `comfy.text_encoders.wan.WanT5Model`, an SD1ClipModel
    named `umt5xxl`: its tower is the child `umt5xxl`)."""

    clip_name, clip = UMT5_SLOT, UMT5_SLOT


class WanT5Tokenizer(FamilyTokenizer):
    """Wan's tokenizer (ComfyUI's `comfy.text_encoders.wan.WanT5Tokenizer`: an SD1Tokenizer with
    clip_name "umt5xxl", its tower tokenizer at `clip_umt5xxl`, tokens under key "umt5xxl")."""

    clip_name, clip = UMT5_SLOT, f"clip_{UMT5_SLOT}"

    @property
    def clip_umt5xxl(self) -> Any:
        return getattr(self, UMT5_SLOT)

    def state_dict(self) -> dict:
        """ComfyUI's tokenizer `state_dict`: the tower's SentencePiece model (`spiece_model`)."""
        return getattr(self, UMT5_SLOT).state_dict()


WAN_TEXT_ENCODERS = EncoderSetSpec(
    "wan", (EncoderOptions(UMT5_SLOT, UMT5_SLOT, PAD_ZERO, None, True, projected_pooled=False,
                           kind="umt5", nominal_width=UMT5_WIDTH, min_length=UMT5_MIN_LENGTH),),
    UMT5_SLOT, set_class=WanT5Model, tokenizer_class=WanT5Tokenizer, clip_types=("wan",))
