"""ComfyUI's `comfy.ldm.lumina.model` for node packs: its SwiGLU `FeedForward` (KJNodes patches
and subclasses it). The Lumina/NextDiT model itself is not run by this engine."""
from compat.facade import facade

facade(__name__, {
    "FeedForward": "comfy_core.models.swiglu:SwiGLUFeedForward",
})
