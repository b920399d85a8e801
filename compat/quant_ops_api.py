"""Today's ComfyUI's `comfy.quant_ops`, for node packs: the quantised-weight formats' table and
comfy-kitchen's tensor classes.

ComfyUI builds this module on `comfy_kitchen` (its kernel library, a requirement there): the
`QuantizedTensor` subclass its quantised layers hold, the layout classes that describe each
format, the layout registry, and `ck` itself. Here the quantised layers are this runtime's own
(comfy_core/models/quant_linear.py, formats in comfy_core/weights/quant_registry.py) and
comfy-kitchen is optional, so this module is what ComfyUI's is in either of its two states:

- comfy-kitchen installed: its classes and `ck` are re-exported, as ComfyUI does, with the same
  back-end choice (Triton only when `--enable-triton-backend` asks, CUDA only on a CUDA 13 torch);
- not installed (the default here): ComfyUI's own fallback, plain placeholder classes, a layout
  registry that holds nothing, and no `ck` (ComfyUI then has none either: `from comfy.quant_ops
  import ck` raises ImportError, which packs catch).

Either way no weight this runtime loads is a `QuantizedTensor` (ours dequantise inside their
layer), so a pack's `isinstance(w, QuantizedTensor)` answers False, as on a ComfyUI whose layers
hold plain tensors. `QUANT_ALGOS` lists the formats this runtime loads, by ComfyUI's names, with
ComfyUI's fields (storage dtype, the scale tensors a layer may carry, the layout's name, the block
size), derived from the runtime's own format table so that the two cannot disagree.
"""
from __future__ import annotations

import logging
from typing import Any

import torch

from comfy_core.weights import quant_fp4, quant_fp8
from comfy_core.weights.quant_registry import FORMATS

log = logging.getLogger(__name__)

# ComfyUI's layout class per format name (its QUANT_ALGOS' `comfy_tensor_layout`).
LAYOUT_NAMES = {
    "float8_e4m3fn": "TensorCoreFP8E4M3Layout",
    "float8_e5m2": "TensorCoreFP8E5M2Layout",
    "mxfp8": "TensorCoreMXFP8Layout",
    "nvfp4": "TensorCoreNVFP4Layout",
    "int8_tensorwise": "TensorWiseINT8Layout",
    "asym_w4a8_int8": "AsymW4A8Int8Layout",
}
GROUP_SIZES = {"mxfp8": quant_fp8.MX_BLOCK, "nvfp4": quant_fp4.NV_BLOCK}
# Integer formats multiply float activations by dequantised weights (ComfyUI: "quantize_input": False).
FLOAT_INPUT_FORMATS = ("int8_tensorwise", "asym_w4a8_int8")


def _kitchen() -> Any:
    """comfy-kitchen, set up as ComfyUI sets it up, or None when it is not installed."""
    try:
        import comfy_kitchen
    except ImportError:
        return None
    cuda = torch.version.cuda
    if cuda is None or int(str(cuda).split(".")[0]) < 13:
        comfy_kitchen.registry.disable("cuda")
    if not _triton_requested():
        comfy_kitchen.registry.disable("triton")
    return comfy_kitchen


def _triton_requested() -> bool:
    """`--enable-triton-backend` without `--disable-triton-backend` (ComfyUI's opt-in); off
    outside a server session."""
    from compat.active import CompatNotInstalledError

    try:
        from compat.cli_args import args

        return bool(getattr(args, "enable_triton_backend", False)) and not getattr(args, "disable_triton_backend", False)
    except CompatNotInstalledError:
        return False


ck = _kitchen()
if ck is not None:
    import comfy_kitchen.tensor as _kitchen_tensor
    from comfy_kitchen.tensor import (QuantizedLayout, QuantizedTensor, get_layout_class,  # noqa: F401
                                      register_layout_class, register_layout_op)

    def _kitchen_layout(name: str) -> type:
        """The kitchen's layout class; a placeholder where this kitchen version lacks it (ComfyUI
        does the same for MXFP8 on older kitchens)."""
        return getattr(_kitchen_tensor, name, None) or type(name, (QuantizedLayout,), {})

    TensorCoreFP8Layout = _kitchen_layout("TensorCoreFP8Layout")
    TensorCoreNVFP4Layout = _kitchen_layout("TensorCoreNVFP4Layout")
    TensorCoreMXFP8Layout = _kitchen_layout("TensorCoreMXFP8Layout")
    TensorWiseINT8Layout = _kitchen_layout("TensorWiseINT8Layout")
    TensorCoreConvRotW4A4Layout = _kitchen_layout("TensorCoreConvRotW4A4Layout")
    AsymW4A8Int8Layout = _kitchen_layout("AsymW4A8Int8Layout")
    TensorCoreAWQW4A16Layout = _kitchen_layout("TensorCoreAWQW4A16Layout")
else:
    del ck  # ComfyUI without comfy-kitchen has no `ck`: `from comfy.quant_ops import ck` raises ImportError
    log.debug("comfy_kitchen is not installed: comfy.quant_ops offers ComfyUI's fallback classes "
              "(this runtime's quantised layers do not need it)")

    class QuantizedTensor:  # type: ignore[no-redef]
        """ComfyUI's placeholder when comfy-kitchen is missing: no tensor is one."""

    class QuantizedLayout:  # type: ignore[no-redef]
        """ComfyUI's placeholder when comfy-kitchen is missing."""

    class TensorCoreFP8Layout(QuantizedLayout):  # type: ignore[no-redef]
        """Per-tensor-scaled fp8 (placeholder)."""

    class TensorCoreNVFP4Layout(QuantizedLayout):  # type: ignore[no-redef]
        """NVFP4: fp4 values in 16-wide blocks with fp8 block scales (placeholder)."""

    class TensorCoreMXFP8Layout(QuantizedLayout):  # type: ignore[no-redef]
        """MXFP8: fp8 values in 32-wide blocks with e8m0 block scales (placeholder)."""

    class TensorWiseINT8Layout(QuantizedLayout):  # type: ignore[no-redef]
        """int8 with a per-tensor or per-row scale (placeholder)."""

    class TensorCoreConvRotW4A4Layout(QuantizedLayout):  # type: ignore[no-redef]
        """ConvRot int4 weights against int4 activations (placeholder)."""

    class AsymW4A8Int8Layout(QuantizedLayout):  # type: ignore[no-redef]
        """Asymmetric int4 weights against int8 activations (placeholder)."""

    class TensorCoreAWQW4A16Layout(QuantizedLayout):  # type: ignore[no-redef]
        """AWQ int4 weights against 16-bit activations (placeholder)."""

    def register_layout_class(name: str, cls: type) -> None:
        """ComfyUI's fallback registers nothing."""

    def get_layout_class(name: str) -> type | None:
        """ComfyUI's fallback knows no layout."""
        return None

    def register_layout_op(*_args: Any, **_kwargs: Any) -> Any:
        """A decorator that leaves the op unregistered (there is no kitchen dispatch to join)."""
        def keep(fn: Any) -> Any:
            return fn
        return keep


class TensorCoreFP8E4M3Layout(TensorCoreFP8Layout):  # type: ignore[misc,valid-type]
    FP8_DTYPE = torch.float8_e4m3fn


class TensorCoreFP8E5M2Layout(TensorCoreFP8Layout):  # type: ignore[misc,valid-type]
    FP8_DTYPE = torch.float8_e5m2


# ComfyUI's alias: "TensorCoreFP8Layout" is the e4m3 one.
TensorCoreFP8Layout = TensorCoreFP8E4M3Layout  # type: ignore[misc]

_LAYOUT_CLASSES = {
    "TensorCoreFP8Layout": TensorCoreFP8Layout, "TensorCoreFP8E4M3Layout": TensorCoreFP8E4M3Layout,
    "TensorCoreFP8E5M2Layout": TensorCoreFP8E5M2Layout, "TensorCoreNVFP4Layout": TensorCoreNVFP4Layout,
    "TensorWiseINT8Layout": TensorWiseINT8Layout, "TensorCoreConvRotW4A4Layout": TensorCoreConvRotW4A4Layout,
    "TensorCoreMXFP8Layout": TensorCoreMXFP8Layout, "AsymW4A8Int8Layout": AsymW4A8Int8Layout,
    "TensorCoreAWQW4A16Layout": TensorCoreAWQW4A16Layout,
}
for _name, _cls in _LAYOUT_CLASSES.items():
    register_layout_class(_name, _cls)


def quant_algos() -> dict[str, dict[str, Any]]:
    """ComfyUI's `QUANT_ALGOS` for the formats this runtime loads (comfy_core/weights/quant_registry.py)."""
    table: dict[str, dict[str, Any]] = {}
    for name, layout in LAYOUT_NAMES.items():
        fmt = FORMATS[name]
        entry: dict[str, Any] = {"storage_t": fmt.storage[0],
                                 "parameters": {*fmt.scales, *fmt.optional},
                                 "comfy_tensor_layout": layout}
        if name in FLOAT_INPUT_FORMATS:
            entry["quantize_input"] = False
        else:  # float formats may carry activation scales next to the weight
            entry["parameters"] |= {"input_scale"} | ({"pre_quant_scale"} if name == "nvfp4" else set())
        if name in GROUP_SIZES:
            entry["group_size"] = GROUP_SIZES[name]
        table[name] = entry
    return table


QUANT_ALGOS = quant_algos()

__all__ = [
    "QuantizedTensor", "QuantizedLayout", "TensorCoreFP8Layout", "TensorCoreFP8E4M3Layout",
    "TensorCoreFP8E5M2Layout", "TensorCoreNVFP4Layout", "TensorCoreMXFP8Layout", "TensorCoreConvRotW4A4Layout",
    "TensorWiseINT8Layout", "AsymW4A8Int8Layout", "QUANT_ALGOS", "register_layout_op",
]
