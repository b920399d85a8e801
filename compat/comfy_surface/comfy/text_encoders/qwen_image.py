"""ComfyUI's `comfy.text_encoders.qwen_image` for node packs: Qwen-Image's Qwen2.5-VL 7B encoder set and
its tokenizer (the prompt template, the image placeholders), our classes
(`comfy_core.families.qwen_image.clip`). They are built by our loaders from the weights: their
constructors are ours, not ComfyUI's."""
from compat.facade import facade

_M = "comfy_core.families.qwen_image.clip:"
facade(__name__, {name: _M + name for name in ("QwenImageTEModel", "QwenImageTokenizer")})
