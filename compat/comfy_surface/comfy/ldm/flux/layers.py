"""ComfyUI's `comfy.ldm.flux.layers` for node packs: Flux.1's blocks (`comfy_core.families.flux.blocks`).

`attention` is an extension point (compat/facade.py `point`): a pack assigning
`comfy.ldm.flux.layers.attention` sets its session's `ExtensionPoints.flux_attention`, which our
Flux's blocks read at every call (`comfy_core.families.flux.math.run_attention`), as in ComfyUI.
"""
from compat.facade import facade, point

_B = "comfy_core.families.flux.blocks:"
facade(__name__, {
    **{name: _B + name for name in (
        "EmbedND", "timestep_embedding", "MLPEmbedder", "RMSNorm", "QKNorm", "SelfAttention", "ModulationOut",
        "Modulation", "apply_mod", "DoubleStreamBlock", "SingleStreamBlock", "LastLayer")},
    "attention": point("flux_attention", "comfy_core.families.flux.math:attention"),
    "rope": "comfy_core.families.flux.math:rope",
})
