"""ComfyUI's `comfy.text_encoders.omnigen2` for node packs: OmniGen 2's Qwen2.5-VL 3B encoder set and
its tokenizer, our classes (`comfy_core.families.omnigen2.clip`). They are built by our loaders from
the weights: their constructors are ours, not ComfyUI's."""
from compat.facade import facade

_M = "comfy_core.families.omnigen2.clip:"
facade(__name__, {name: _M + name for name in ("Omnigen2Model", "Omnigen2Tokenizer")})
