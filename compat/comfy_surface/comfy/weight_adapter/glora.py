"""ComfyUI's `comfy.weight_adapter.glora` (compat/weight_adapter_api.py)."""
from compat.facade import facade

facade(__name__, {"GLoRAAdapter": "compat.weight_adapter_api:GLoRAAdapter"})
