"""ComfyUI's `comfy.text_encoders.sa_t5` for node packs: Stable Audio Open's T5-base encoder set and its
tokenizer, our classes (`comfy_core.families.stable_audio.clip`). They are built by our loaders from
the weights: their constructors are ours, not ComfyUI's."""
from compat.facade import facade

_M = "comfy_core.families.stable_audio.clip:"
facade(__name__, {name: _M + name for name in ("SAT5Model", "SAT5Tokenizer")})
