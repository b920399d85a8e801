"""ComfyUI's `comfy.text_encoders.sd3_clip` for node packs (Easy-Use imports it at load): SD3's
CLIP-L + CLIP-G + T5-XXL set and its tokenizers, our classes.

- `SD3ClipModel`: the encoder set a loaded SD3 CLIP's `cond_stage_model` is
  (comfy_core/text_encoders/encoder_set.py), towers `clip_l`, `clip_g`, `t5xxl` (any may be absent);
- `SD3Tokenizer`: its tokenizers (comfy_core/text_encoders/sd_tokenizer.py);
- `T5XXLModel`: our T5 tower (comfy_core/text_encoders/t5.py: `T5TextEncoder`, ComfyUI's
  `SDClipModel` surface: `transformer`, `special_tokens`, `encode_token_weights`, ...);
- `T5XXLTokenizer`: our T5 tokenizer (min length 77 by default, as SD3's);
- `t5_xxl_detect(state_dict, prefix)`: ComfyUI's dtype probe (compat/files_clip.py).

These classes are built by our loaders from the weights: their constructors are ours, not
ComfyUI's (`SD3ClipModel(clip_l=..., ...)` is not a way to make one here).
"""
from compat.facade import facade

facade(__name__, {
    "SD3ClipModel": "comfy_core.families.sd3.clip:SD3ClipModel",
    "SD3Tokenizer": "comfy_core.families.sd3.clip:SD3Tokenizer",
    "T5XXLModel": "comfy_core.text_encoders.t5:T5TextEncoder",
    "T5XXLTokenizer": "comfy_core.text_encoders.t5_tokenizer:T5XXLTokenizer",
    "t5_xxl_detect": "compat.files_clip:t5_xxl_detect",
})
