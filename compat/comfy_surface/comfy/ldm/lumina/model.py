"""ComfyUI's `comfy.ldm.lumina.model` for node packs: the NextDiT that Lumina 2 and Z-Image run
(`comfy_core.families.zimage.nextdit`) and its blocks under ComfyUI's names, so a pack's
`isinstance(network, comfy.ldm.lumina.model.NextDiT)` reaches ours; and the SwiGLU `FeedForward`
KJNodes patches and subclasses (`comfy_core.models.swiglu`). The constructors are ours (built from
a config by our loaders)."""
from compat.facade import facade

_M = "comfy_core.families.zimage.nextdit:"
facade(__name__, {
    "FeedForward": "comfy_core.models.swiglu:SwiGLUFeedForward",
    **{name: _M + name for name in ("NextDiT", "JointAttention", "JointTransformerBlock", "FinalLayer")},
})
