"""ComfyUI's `comfy.ldm.flux.math` for node packs: RoPE in ComfyUI's rotation-matrix layout
(`comfy_core.attention.rope`) and the DiT attention over `[B, H, L, D]` (`compat.ldm_dit`)."""
from compat.facade import facade

_R = "comfy_core.attention.rope:"
facade(__name__, {
    "apply_rope": _R + "apply_rope",
    "apply_rope1": _R + "apply_rope1",
    "rope": "compat.ldm_dit:rope",
    "attention": "compat.ldm_dit:attention",
})
