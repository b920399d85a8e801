"""ComfyUI's `comfy.weight_adapter.loha` (compat/weight_adapter_api.py)."""
from compat.facade import facade

facade(__name__, {"LoHaAdapter": "compat.weight_adapter_api:LoHaAdapter"})
