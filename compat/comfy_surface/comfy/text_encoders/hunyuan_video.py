"""ComfyUI's `comfy.text_encoders.hunyuan_video` for node packs: HunyuanVideo's text-encoder set (CLIP-L
plus the LLaVA-Llama-3 tower) and its tokenizer, our classes
(`comfy_core.families.hunyuan_video.clip`). They are built by our loaders from the weights: their
constructors are ours, not ComfyUI's."""
from compat.facade import facade

_M = "comfy_core.families.hunyuan_video.clip:"
facade(__name__, {name: _M + name for name in ("HunyuanVideoClipModel", "HunyuanVideoTokenizer")})
