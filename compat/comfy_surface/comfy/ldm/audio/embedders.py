"""ComfyUI's `comfy.ldm.audio.embedders` for node packs: Stable Audio's number conditioner (the
seconds-start / seconds-total embedding, `comfy_core.families.stable_audio.conditioner`)."""
from compat.facade import facade

facade(__name__, {"NumberConditioner": "comfy_core.families.stable_audio.conditioner:NumberConditioner"})
