"""LTX-Video's text-encoder set (ComfyUI's `comfy/text_encoders/lt.py` over `genmo.py`): the one
T5-XXL tower `t5xxl`, run with its token mask (ComfyUI's Mochi T5, `attention_mask=True`: pads are
masked in the tower and the mask goes out as the conditioning's `attention_mask`), tokenized to at
least 128 tokens, loaded by CLIPLoader type "ltxv" or from a single file's `text_encoders.t5xxl.`.
ComfyUI's class names for the set (`MochiT5XXL`, what `ltxv_te` builds) and its tokenizer
(`LTXVT5Tokenizer`, tower tokenizer at `clip_t5xxl`)."""
from __future__ import annotations

from typing import Any, Mapping

from comfy_core.text_encoders.encoder_set import PAD_ZERO, EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer

T5_SLOT = "t5xxl"
T5_WIDTH = 4096
LTXV_T5_MIN_LENGTH = 128  # ComfyUI's lt.T5XXLTokenizer


class MochiT5XXL(TextEncoderSet):
    """ComfyUI's `comfy.text_encoders.genmo.MochiT5XXL` (an SD1ClipModel named `t5xxl` whose tower
    runs with attention masks)."""

    clip_name, clip = T5_SLOT, f"clip_{T5_SLOT}"

    def __init__(self, spec: EncoderSetSpec, encoders: Mapping[str, Any]) -> None:
        super().__init__(spec, encoders)
        tower = self.encoder(T5_SLOT)
        tower.enable_attention_masks = True  # ComfyUI's T5XXLModel(attention_mask=True)
        tower.return_attention_masks = True


class LTXVT5Tokenizer(FamilyTokenizer):
    """ComfyUI's `comfy.text_encoders.lt.LTXVT5Tokenizer` (clip_name "t5xxl", tokens under "t5xxl")."""

    clip_name, clip = T5_SLOT, f"clip_{T5_SLOT}"

    @property
    def clip_t5xxl(self) -> Any:
        return getattr(self, T5_SLOT)


LTXV_TEXT_ENCODERS = EncoderSetSpec(
    "ltxv", (EncoderOptions(T5_SLOT, T5_SLOT, PAD_ZERO, None, True, projected_pooled=False,
                            prefixes=("text_encoders.t5xxl.transformer.",), kind="t5", nominal_width=T5_WIDTH,
                            min_length=LTXV_T5_MIN_LENGTH),),
    T5_SLOT, set_class=MochiT5XXL, tokenizer_class=LTXVT5Tokenizer, clip_types=("ltxv",))
