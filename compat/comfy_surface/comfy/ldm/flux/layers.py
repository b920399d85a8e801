"""ComfyUI's `comfy.ldm.flux.layers` for node packs: Flux.1's blocks (`comfy_core.families.flux.blocks`).

`attention` and `rope` are the functions the blocks call through `comfy_core.families.flux.math`
at every call (ComfyUI's layers import them from `.math`): a pack assigning
`comfy.ldm.flux.layers.attention` replaces the attention of our Flux's blocks, as in ComfyUI.
"""
from compat.facade import facade

_B = "comfy_core.families.flux.blocks:"
facade(__name__, {
    **{name: _B + name for name in (
        "EmbedND", "timestep_embedding", "MLPEmbedder", "RMSNorm", "QKNorm", "SelfAttention", "ModulationOut",
        "Modulation", "apply_mod", "DoubleStreamBlock", "SingleStreamBlock", "LastLayer")},
    "attention": "comfy_core.families.flux.math:attention",
    "rope": "comfy_core.families.flux.math:rope",
})
