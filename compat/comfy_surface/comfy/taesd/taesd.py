"""ComfyUI's `comfy.taesd.taesd` for node packs: the TAESD building blocks and decoder
(comfy_core/models/taesd.py). The TAESD encoder and the `TAESD` encoder+decoder pair are not
provided (previews only decode)."""
from compat.facade import facade

facade(__name__, {
    "Block": "comfy_core.models.taesd:Block",
    "Clamp": "comfy_core.models.taesd:Clamp",
    "conv": "comfy_core.models.taesd:conv",
    "Decoder": "comfy_core.models.taesd:TAESDDecoder",
})
