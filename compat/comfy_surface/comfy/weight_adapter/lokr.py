"""ComfyUI's `comfy.weight_adapter.lokr` (compat/weight_adapter_api.py)."""
from compat.facade import facade

facade(__name__, {"LoKrAdapter": "compat.weight_adapter_api:LoKrAdapter"})
