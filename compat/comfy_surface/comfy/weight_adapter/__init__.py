"""ComfyUI's `comfy.weight_adapter`: the LoRA / LoHa / LoKr / GLoRA / OFT / BOFT adapter classes over
our LoRA parser and adapters (compat/weight_adapter_api.py)."""
from compat.facade import facade

facade(__name__, {name: f"compat.weight_adapter_api:{name}" for name in (
    "WeightAdapterBase", "LoRAAdapter", "LoHaAdapter", "LoKrAdapter", "GLoRAAdapter", "OFTAdapter", "BOFTAdapter",
    "adapters", "adapter_maps")})
