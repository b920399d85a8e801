"""Today's `comfy.quant_ops` for packs: ComfyUI's format table for the formats this runtime loads,
its layout classes, and its fallback behaviour where comfy-kitchen is not installed (here)."""
from __future__ import annotations

import importlib.util

import pytest

KITCHEN = importlib.util.find_spec("comfy_kitchen") is not None


def test_quant_algos_describe_the_formats_the_runtime_loads(session):
    import torch

    import comfy.quant_ops as quant_ops
    from comfy_core.weights.quant_registry import FORMATS

    algos = quant_ops.QUANT_ALGOS
    assert set(algos) == {"float8_e4m3fn", "float8_e5m2", "mxfp8", "nvfp4", "int8_tensorwise", "asym_w4a8_int8"}
    assert set(algos) <= set(FORMATS)  # every format named is one the loaders read
    # The entries as ComfyUI's table spells them.
    assert algos["float8_e4m3fn"] == {"storage_t": torch.float8_e4m3fn, "parameters": {"weight_scale", "input_scale"},
                                      "comfy_tensor_layout": "TensorCoreFP8E4M3Layout"}
    assert algos["nvfp4"] == {"storage_t": torch.uint8, "group_size": 16,
                              "parameters": {"weight_scale", "weight_scale_2", "input_scale", "pre_quant_scale"},
                              "comfy_tensor_layout": "TensorCoreNVFP4Layout"}
    assert algos["mxfp8"]["group_size"] == 32 and algos["mxfp8"]["storage_t"] == torch.float8_e4m3fn
    assert algos["int8_tensorwise"] == {"storage_t": torch.int8, "parameters": {"weight_scale"},
                                        "comfy_tensor_layout": "TensorWiseINT8Layout", "quantize_input": False}


def test_layout_classes_and_the_fp8_alias(session):
    import torch

    from comfy.quant_ops import (TensorCoreFP8E4M3Layout, TensorCoreFP8E5M2Layout, TensorCoreFP8Layout,
                                 TensorWiseINT8Layout, QUANT_ALGOS)

    assert TensorCoreFP8Layout is TensorCoreFP8E4M3Layout  # ComfyUI's backward-compatible alias
    assert TensorCoreFP8E4M3Layout.FP8_DTYPE == torch.float8_e4m3fn
    assert TensorCoreFP8E5M2Layout.FP8_DTYPE == torch.float8_e5m2
    assert isinstance(TensorWiseINT8Layout, type)
    from comfy import quant_ops
    for entry in QUANT_ALGOS.values():  # every layout the table names exists on the module
        assert isinstance(getattr(quant_ops, entry["comfy_tensor_layout"]), type)


@pytest.mark.skipif(KITCHEN, reason="comfy-kitchen is installed: its own classes are re-exported")
def test_without_comfy_kitchen_the_module_behaves_as_comfyuis_fallback(session):
    import torch

    import comfy.quant_ops as quant_ops

    # No weight is a QuantizedTensor (a pack's isinstance check answers False, nothing raises).
    assert not isinstance(torch.zeros(2), quant_ops.QuantizedTensor)
    assert quant_ops.get_layout_class("TensorCoreFP8E4M3Layout") is None
    quant_ops.register_layout_class("Mine", type("Mine", (), {}))  # accepted, as ComfyUI's fallback
    assert quant_ops.get_layout_class("Mine") is None
    # ComfyUI's fallback defines no `ck`: the import fails the way packs guard against.
    with pytest.raises(ImportError):
        from comfy.quant_ops import ck  # noqa: F401
    decorated = quant_ops.register_layout_op("aten.linear.default", quant_ops.TensorWiseINT8Layout)(len)
    assert decorated is len
