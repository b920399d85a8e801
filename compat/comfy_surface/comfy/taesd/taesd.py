"""ComfyUI's `comfy.taesd.taesd` for node packs: the TAESD building blocks, encoder, decoder and
the `TAESD` pair (comfy_core/models/taesd.py)."""
from compat.facade import facade

facade(__name__, {
    "Block": "comfy_core.models.taesd:Block",
    "Clamp": "comfy_core.models.taesd:Clamp",
    "conv": "comfy_core.models.taesd:conv",
    "Decoder": "comfy_core.models.taesd:TAESDDecoder",
    "Encoder": "comfy_core.models.taesd:TAESDEncoder",
    "TAESD": "comfy_core.models.taesd:TAESD",
})
