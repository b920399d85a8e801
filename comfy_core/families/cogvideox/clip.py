"""CogVideoX's text-encoder set: T5-XXL alone (ComfyUI's CLIPLoader type "cogvideox": its SD3 set
with only the T5 tower, `comfy.text_encoders.sd3_clip.SD3ClipModel`), the final normed states,
no token mask, prompts padded to at least 226 tokens (`comfy.text_encoders.cogvideo.
CogVideoXT5Tokenizer`, CogVideoX's `max_sequence_length`). The tower is SD3 / Flux's T5-XXL
(`t5xxl_fp16.safetensors`)."""
from __future__ import annotations

from typing import Any

from comfy_core.families.sd3.clip import SD3ClipModel
from comfy_core.text_encoders.encoder_set import PAD_ZERO, EncoderOptions, EncoderSetSpec
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer

T5_SLOT = "t5xxl"
T5_MIN_LENGTH = 226


class CogVideoXT5Tokenizer(FamilyTokenizer):
    """ComfyUI's `comfy.text_encoders.cogvideo.CogVideoXT5Tokenizer` (T5-XXL's, 226-token minimum)."""

    @property
    def clip_t5xxl(self) -> Any:
        return getattr(self, T5_SLOT)


COGVIDEOX_TEXT_ENCODERS = EncoderSetSpec(
    "cogvideox", (EncoderOptions(T5_SLOT, T5_SLOT, PAD_ZERO, None, True, projected_pooled=False,
                                 prefixes=("text_encoders.t5xxl.transformer.",), kind="t5", nominal_width=4096,
                                 min_length=T5_MIN_LENGTH),),
    T5_SLOT, set_class=SD3ClipModel, tokenizer_class=CogVideoXT5Tokenizer, clip_types=("cogvideox",))
