"""ComfyUI's `comfy.ldm.flux.model` for node packs: the Flux.1 transformer (`comfy_core.families.flux.dit`).

`FluxParams` is our `FluxConfig` (ComfyUI's field names; `Flux(**params)` takes them). The block
classes and `timestep_embedding` are the names comfy_core/families/flux/dit.py itself uses, so a pack
replacing `comfy.ldm.flux.model.timestep_embedding` changes what our Flux's `forward_orig` calls.
"""
from compat.facade import facade

_F = "comfy_core.families.flux.dit:"
facade(__name__, {
    "Flux": _F + "FluxTransformer",
    "FluxParams": _F + "FluxConfig",
    **{name: _F + name for name in ("DoubleStreamBlock", "EmbedND", "LastLayer", "MLPEmbedder", "SingleStreamBlock",
                                    "timestep_embedding")},
    "Modulation": "comfy_core.families.flux.blocks:Modulation",
    "RMSNorm": "comfy_core.families.flux.blocks:RMSNorm",
})
