"""ComfyUI's `comfy.ldm.chroma.model` for node packs: the Chroma transformer
(`comfy_core.families.chroma.dit`). `ChromaParams` is our `ChromaConfig` (ComfyUI's field names;
`Chroma(**params)` takes them); the blocks are `comfy_core.families.chroma.blocks`'."""
from compat.facade import facade

_B = "comfy_core.families.chroma.blocks:"
facade(__name__, {
    "Chroma": "comfy_core.families.chroma.dit:Chroma",
    "ChromaParams": "comfy_core.families.chroma.dit:ChromaConfig",
    **{name: _B + name for name in ("Approximator", "ChromaModulationOut", "DoubleStreamBlock", "LastLayer",
                                    "SingleStreamBlock")},
    "EmbedND": "comfy_core.families.flux.blocks:EmbedND",
    "timestep_embedding": "comfy_core.families.flux.blocks:timestep_embedding",
})
