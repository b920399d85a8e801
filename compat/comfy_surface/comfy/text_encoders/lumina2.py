"""ComfyUI's `comfy.text_encoders.lumina2` for node packs: Lumina 2's Gemma 2 2B encoder set and its
tokenizer, our classes (`comfy_core.families.lumina2.clip`). They are built by our loaders from the
weights: their constructors are ours, not ComfyUI's."""
from compat.facade import facade

_M = "comfy_core.families.lumina2.clip:"
facade(__name__, {name: _M + name for name in ("LuminaModel", "LuminaTokenizer")})
