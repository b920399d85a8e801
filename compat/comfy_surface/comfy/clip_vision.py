"""ComfyUI's `comfy.clip_vision` for node packs: our `ClipVision` (as `ClipVisionModel`), its output
class (`Output`), `clip_preprocess`, the loaders and `convert_to_transformers` (OpenAI-CLIP visual keys to
transformers' names) (compat/files_clip_vision.py)."""
from compat.facade import facade

facade(__name__, {
    "ClipVisionModel": "comfy_core.clip_vision.clip_vision:ClipVision",
    "Output": "comfy_core.clip_vision.output:ClipVisionOutput",
    "clip_preprocess": "comfy_core.clip_vision.preprocess:clip_preprocess",
    "load": "compat.files_clip_vision:load",
    "load_clipvision_from_sd": "compat.files_clip_vision:load_clipvision_from_sd",
    "convert_to_transformers": "compat.files_clip_vision:convert_to_transformers",
})
