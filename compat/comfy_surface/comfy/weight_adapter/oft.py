"""ComfyUI's `comfy.weight_adapter.oft` (compat/weight_adapter_api.py)."""
from compat.facade import facade

facade(__name__, {"OFTAdapter": "compat.weight_adapter_api:OFTAdapter"})
