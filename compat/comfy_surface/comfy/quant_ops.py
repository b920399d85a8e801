"""Today's ComfyUI's `comfy.quant_ops` (compat/quant_ops_api.py): `QUANT_ALGOS`, the layout
classes, `QuantizedTensor`, and `ck` where comfy-kitchen is installed."""
from compat.facade import facade

facade(__name__, {name: "compat.quant_ops_api:" + name for name in (
    "QuantizedTensor", "QuantizedLayout", "TensorCoreFP8Layout", "TensorCoreFP8E4M3Layout",
    "TensorCoreFP8E5M2Layout", "TensorCoreNVFP4Layout", "TensorCoreMXFP8Layout", "TensorCoreConvRotW4A4Layout",
    "TensorWiseINT8Layout", "AsymW4A8Int8Layout", "TensorCoreAWQW4A16Layout", "QUANT_ALGOS",
    "register_layout_op", "register_layout_class", "get_layout_class", "ck")})
