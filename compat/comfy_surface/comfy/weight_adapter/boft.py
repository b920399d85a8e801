"""ComfyUI's `comfy.weight_adapter.boft` (compat/weight_adapter_api.py)."""
from compat.facade import facade

facade(__name__, {"BOFTAdapter": "compat.weight_adapter_api:BOFTAdapter"})
