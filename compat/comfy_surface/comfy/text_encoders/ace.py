"""ComfyUI's `comfy.text_encoders.ace` for node packs: ACE-Step 1's umT5-base encoder set (with the
lyrics tokenizer) and its tokenizer, our classes (`comfy_core.families.ace_step.clip`). They are
built by our loaders from the weights: their constructors are ours, not ComfyUI's."""
from compat.facade import facade

_M = "comfy_core.families.ace_step.clip:"
facade(__name__, {name: _M + name for name in ("AceT5Model", "AceT5Tokenizer")})
