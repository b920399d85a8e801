"""ComfyUI's `comfy.text_encoders.long_clipl` for node packs: `model_options_long_clip(sd,
tokenizer_data, model_options)`, which sizes a CLIP text tower's tokenizer and position table from
its weights (Long-CLIP's 248 positions; nunchaku's text-encoder loader calls it for every state
dict). Compat/files_clip.py."""
from compat.facade import facade

facade(__name__, {"model_options_long_clip": "compat.files_clip:model_options_long_clip"})
