"""ComfyUI's `comfy.sdxl_clip` for node packs: our SDXL classes under ComfyUI's names.

An SDXL CLIP's `cond_stage_model` is an `SDXLClipModel` (children `clip_l`, an `SDClipModel`,
and `clip_g`, an `SDXLClipG`), the refiner's an `SDXLRefinerClipModel`; the tokenizer an
`SDXLTokenizer`. Stable Cascade's CLIP-G is not a family here (constructing it raises).
"""
from compat.facade import facade

facade(__name__, {
    "SDXLClipG": "comfy_core.text_encoders.encoder:SDXLClipG",
    "SDXLClipModel": "comfy_core.families.sdxl.clip:SDXLClipModel",
    "SDXLRefinerClipModel": "comfy_core.families.sdxl.clip:SDXLRefinerClipModel",
    "SDXLTokenizer": "comfy_core.families.sdxl.clip:SDXLTokenizer",
    "SDXLClipGTokenizer": "comfy_core.text_encoders.sd_tokenizer:SDTokenizer",
    "StableCascadeClipModel": "compat.files_clip:StableCascadeClipModel",
})
