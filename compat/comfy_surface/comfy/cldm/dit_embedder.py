"""ComfyUI's `comfy.cldm.dit_embedder` for node packs: the SD3.5 (Large) ControlNet embedder
(`comfy_core.controlnet.dit_embedder`)."""
from compat.facade import facade

facade(__name__, {"ControlNetEmbedder": "comfy_core.controlnet.dit_embedder:ControlNetEmbedder"})
