"""ComfyUI's `comfy.text_encoders.ace15` for node packs: ACE-Step 1.5's text-encoder set (Qwen3 0.6B
embedding model, the 5 Hz LM) and its tokenizer, our classes (`comfy_core.families.ace_step15.clip`,
compat/ace_step15_api.py). They are built by our loaders from the weights: their constructors are
ours, not ComfyUI's; `ACE15Tokenizer.tokenize_with_weights` is ComfyUI's method (same arguments,
same keys), so a pack wrapping it wraps what the text encoders use."""
from compat.facade import facade

_M = "comfy_core.families.ace_step15.clip:"
facade(__name__, {name: _M + name for name in ("ACE15Tokenizer", "ACE15TEModel")})
