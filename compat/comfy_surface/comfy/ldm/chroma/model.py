"""ComfyUI's `comfy.ldm.chroma.model` for node packs: the Chroma transformer
(`comfy_core.models.flux_chroma`). `ChromaParams` is our `ChromaConfig` (ComfyUI's field names;
`Chroma(**params)` takes them); the blocks are `comfy_core.models.flux_chroma_blocks`'."""
from compat.facade import facade

_B = "comfy_core.models.flux_chroma_blocks:"
facade(__name__, {
    "Chroma": "comfy_core.models.flux_chroma:Chroma",
    "ChromaParams": "comfy_core.models.flux_chroma:ChromaConfig",
    **{name: _B + name for name in ("Approximator", "ChromaModulationOut", "DoubleStreamBlock", "LastLayer",
                                    "SingleStreamBlock")},
    "EmbedND": "comfy_core.models.flux_blocks:EmbedND",
    "timestep_embedding": "comfy_core.models.flux_blocks:timestep_embedding",
})
