"""ComfyUI's `comfy.ldm.aura.mmdit` (AuraFlow, not implemented here; compat/ldm_aura.py)."""
from compat.facade import facade

facade(__name__, {name: "compat.ldm_aura:" + name for name in (
    "modulate", "find_multiple", "MLP", "MultiHeadLayerNorm", "SingleAttention", "DoubleAttention", "MMDiTBlock",
    "DiTBlock", "TimestepEmbedder", "MMDiT")})
