"""ComfyUI's `comfy.text_encoders.flux` for node packs: Flux's CLIP-L + T5-XXL set and its
tokenizers, our classes (`FluxClipModel`: comfy_core/text_encoders/encoder_set.py, towers `clip_l`
and `t5xxl`; `FluxTokenizer`: comfy_core/text_encoders/sd_tokenizer.py). `T5XXLTokenizer` is our
one T5 tokenizer class (ComfyUI has a second class here whose minimum length is 256: ours takes it
as `min_length`, and Flux's tokenizer is built with 256). Constructors are ours (see sd3_clip), so
`flux_clip(**comfy.sd.t5xxl_detect(sds))` returns a `FluxClipModel` subclass whose construction raises
`UnsupportedTextEncoderError` (compat/files_clip.py): Flux's encoders are loaded from their files here."""
from compat.facade import facade

facade(__name__, {
    "FluxClipModel": "comfy_core.families.flux.clip:FluxClipModel",
    "FluxTokenizer": "comfy_core.families.flux.clip:FluxTokenizer",
    "T5XXLTokenizer": "comfy_core.text_encoders.t5_tokenizer:T5XXLTokenizer",
    "T5XXLModel": "comfy_core.text_encoders.t5:T5TextEncoder",
    "flux_clip": "compat.files_clip:flux_clip",
})
