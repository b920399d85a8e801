"""ComfyUI's `comfy.ldm.flux.math` for node packs: Flux's RoPE (ComfyUI's rotation-matrix layout)
and the DiT attention over `[B, H, L, D]`, the functions our Flux runs (`comfy_core.families.flux.math`)."""
from compat.facade import facade, point

_F = "comfy_core.families.flux.math:"
facade(__name__, {
    "apply_rope": _F + "apply_rope",
    "apply_rope1": _F + "apply_rope1",
    "rope": _F + "rope",
    # an extension point: a pack's replacement reaches our Flux's blocks (flux/layers.py)
    "attention": point("flux_attention", _F + "attention"),
})
