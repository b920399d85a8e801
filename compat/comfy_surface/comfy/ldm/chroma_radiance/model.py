"""ComfyUI's `comfy.ldm.chroma_radiance.model` for node packs: Chroma Radiance, the pixel-space Chroma
(`comfy_core.families.chroma.radiance`); `ChromaRadianceParams` is our config (ComfyUI's field
names). A `ChromaRadiance` is a `comfy.ldm.chroma.model.Chroma`, as in ComfyUI."""
from compat.facade import facade

_M = "comfy_core.families.chroma.radiance:"
facade(__name__, {
    "ChromaRadiance": _M + "ChromaRadiance",
    "ChromaRadianceParams": _M + "ChromaRadianceConfig",
})
