"""ComfyUI's `comfy.sd1_clip` for node packs: our tokenizer and text-encoder classes under
ComfyUI's names (comfy_core.text_encoders), ComfyUI's prompt-weight functions, and the helpers
in compat/files_clip.py.

`SD1ClipModel` is the class of an SD1 CLIP's `cond_stage_model`, `SDClipModel` of each tower
in it, `SD1Tokenizer` of its `tokenizer`, `SDTokenizer` of each per-encoder tokenizer.
`ClipTokenWeightEncoder` is ComfyUI's base-less mix-in (compat/clip_weights.py), so a pack's
`class X(torch.nn.Module, ClipTokenWeightEncoder)` gets ComfyUI's `encode_token_weights` over its own
`encode`; the engine's encoders keep their own class (not subclasses of it).
"""
from compat.facade import facade

facade(__name__, {
    "SDTokenizer": "comfy_core.text_encoders.sd_tokenizer:SDTokenizer",
    "SD1Tokenizer": "comfy_core.families.sd1.clip:SD1Tokenizer",
    "SDClipModel": "comfy_core.text_encoders.encoder:ClipTextEncoder",
    "ClipTokenWeightEncoder": "compat.clip_weights:ClipTokenWeightEncoder",
    "SD1ClipModel": "comfy_core.families.sd1.clip:SD1ClipModel",
    "token_weights": "comfy_core.text_encoders.prompt_weights:parse_weights",
    "parse_parentheses": "comfy_core.text_encoders.prompt_weights:split_parentheses",
    "escape_important": "comfy_core.text_encoders.prompt_weights:escape_important",
    "unescape_important": "comfy_core.text_encoders.prompt_weights:unescape_important",
    "gen_empty_tokens": "compat.files_clip:gen_empty_tokens",
    "expand_directory_list": "compat.files_clip:expand_directory_list",
    "load_embed": "compat.files_clip:load_embed",
    "safe_load_embed_zip": "compat.files_clip:safe_load_embed_zip",
})
