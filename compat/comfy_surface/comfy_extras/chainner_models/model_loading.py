"""ComfyUI's deprecated `comfy_extras.chainner_models.model_loading.load_state_dict(state_dict)`:
an upscale model from a state dict, through spandrel as ComfyUI does (Easy-Use and Comfyroll
import it)."""
from compat.facade import facade

facade(__name__, {"load_state_dict": "compat.extras_helpers:load_upscale_state_dict"})
