"""ComfyUI's `comfy.weight_adapter.lora` (compat/weight_adapter_api.py)."""
from compat.facade import facade

facade(__name__, {"LoRAAdapter": "compat.weight_adapter_api:LoRAAdapter"})
