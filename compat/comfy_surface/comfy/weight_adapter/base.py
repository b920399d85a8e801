"""ComfyUI's `comfy.weight_adapter.base` (compat/weight_adapter_api.py)."""
from compat.facade import facade

facade(__name__, {name: f"compat.weight_adapter_api:{name}" for name in (
    "WeightAdapterBase", "factorization", "pad_tensor_to_shape", "tucker_weight", "tucker_weight_from_conv",
    "weight_decompose")})
