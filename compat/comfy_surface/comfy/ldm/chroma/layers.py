"""ComfyUI's `comfy.ldm.chroma.layers` for node packs: Chroma's blocks
(`comfy_core.families.chroma.blocks`) and the Flux pieces it imports."""
from compat.facade import facade, point

_B = "comfy_core.families.chroma.blocks:"
facade(__name__, {
    **{name: _B + name for name in ("Approximator", "ChromaModulationOut", "DoubleStreamBlock", "LastLayer",
                                    "SingleStreamBlock")},
    **{name: "comfy_core.families.flux.blocks:" + name for name in ("MLPEmbedder", "ModulationOut", "QKNorm", "RMSNorm",
                                                                   "SelfAttention")},
    "attention": point("flux_attention", "comfy_core.families.flux.math:attention"),
})
