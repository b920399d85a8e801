"""The classes ComfyUI gives SDXL and its refiner's CLIP (`clip.cond_stage_model` is the set, `clip.tokenizer` the
tokenizer), which packs check by `isinstance` or by name; the family's `EncoderSetSpec` names them
(`set_class`, `tokenizer_class`)."""
from __future__ import annotations

from comfy_core.text_encoders.encoder_set import TextEncoderSet
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer


class SDXLClipModel(TextEncoderSet):
    """SDXL's CLIP-L + OpenCLIP bigG set (ComfyUI's `comfy.sdxl_clip.SDXLClipModel`)."""


class SDXLRefinerClipModel(TextEncoderSet):
    """The SDXL refiner's bigG set (ComfyUI's `comfy.sdxl_clip.SDXLRefinerClipModel`)."""

    clip_name, clip = "g", "clip_g"


class SDXLTokenizer(FamilyTokenizer):
    """SDXL's CLIP-L + bigG tokenizers (ComfyUI's `comfy.sdxl_clip.SDXLTokenizer`)."""


class SDXLRefinerTokenizer(FamilyTokenizer):
    """The SDXL refiner's bigG tokenizer (ComfyUI uses its SDXLTokenizer class there too)."""
