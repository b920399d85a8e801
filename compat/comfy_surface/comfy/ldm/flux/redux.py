"""ComfyUI's `comfy.ldm.flux.redux` for node packs: the Flux Redux image projector
(`comfy_core.style_models.redux`)."""
from compat.facade import facade

facade(__name__, {"ReduxImageEncoder": "comfy_core.style_models.redux:ReduxImageEncoder"})
