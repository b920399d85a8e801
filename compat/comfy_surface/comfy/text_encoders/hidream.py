"""ComfyUI's `comfy.text_encoders.hidream` for node packs: HiDream-I1's four-encoder set (CLIP-L, CLIP-G,
T5-XXL, Llama 3.1 8B) and its tokenizer, our classes (`comfy_core.families.hidream.clip`). They are
built by our loaders from the weights: their constructors are ours, not ComfyUI's."""
from compat.facade import facade

_M = "comfy_core.families.hidream.clip:"
facade(__name__, {name: _M + name for name in ("HiDreamTEModel", "HiDreamTokenizer")})
