"""ComfyUI's `comfy.ops` for node packs: layer classes with per-call weight casting and weight
hooks (compat/ldm_ops.py); they are accepted as `operations` by our model constructors."""
from compat.facade import facade

_O = "compat.ldm_ops:"
facade(__name__, {name: _O + name for name in (
    "CastWeightBiasOp", "disable_weight_init", "manual_cast", "fp8_ops", "scaled_fp8_ops", "pick_operations",
    "cast_bias_weight", "uncast_bias_weight", "cast_to_input", "scaled_dot_product_attention",
    "UnsupportedOperations", "CUBLAS_IS_AVAILABLE", "fp8_linear")} | {"cast_to": "compat.device_dtypes:cast_to"})
