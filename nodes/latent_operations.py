"""LATENT_OPERATION nodes of ComfyUI's comfy_extras/nodes_latent.py (0.3.64), experimental there:
LatentOperationTonemapReinhard and LatentOperationSharpen make an operation;
LatentApplyOperation applies one to a latent and LatentApplyOperationCFG to the guidance
direction (positive - negative prediction) at every sampling step, or, as today's ComfyUI
(nodes_latent.py@f35df501, V3 there), at the steps between its `start_percent` and `end_percent`.

A LATENT_OPERATION is a callable `operation(latent=samples) -> samples` (ComfyUI's convention,
so packs' operations work here and ours in packs); the ones made here are value objects
(comfy_core/latent/operations.py) whose settings are their cache identity.
"""
from __future__ import annotations

import math
from typing import Any

from graph import v3_schema as v3
from graph.native import Float, Input, Int, Output, node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe

# torch is imported inside the functions that run: registering these nodes and rendering
# /object_info must not import it (server start-up).

MODULE = "comfy_extras.nodes_latent"
CATEGORY = "latent/advanced/operations"


def _operation(value: Any) -> Any:
    if not callable(value):
        raise NodeInputError("operation", "a LATENT_OPERATION (a callable operation(latent=...))", describe(value))
    return value


def _number(value: Any, input_name: str, low: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or value < low:
        raise NodeInputError(input_name, f"a FLOAT >= {low}", repr(value))
    return value


@node("LatentApplyOperation", display_name=None, category=CATEGORY, experimental=True, python_module=MODULE,
      inputs=[Input("samples", "LATENT"), Input("operation", "LATENT_OPERATION")], outputs=[Output("LATENT")])
def latent_apply_operation(samples: dict, operation: Any) -> tuple[dict]:
    """`operation` applied to the samples; the LATENT's other keys are kept."""
    import torch

    latent = checks.latent(samples, "samples")
    result = _operation(operation)(latent=latent)
    if not isinstance(result, torch.Tensor):
        raise NodeInputError("operation", "an operation that returns a tensor", f"one that returned {describe(result)}")
    out = dict(samples)
    out["samples"] = result
    return (out,)


# Today's ComfyUI (comfy_extras/nodes_latent.py@f35df50186a06cbfe77ced0cb7de0216d9da5df2) declares
# LatentApplyOperationCFG with the V3 schema, in its "model/latent/..." category, and a sigma window
# (optional start_percent / end_percent, tooltips quoted from there).
START_PERCENT_TOOLTIP = "Start applying the operation at this fraction of the model's denoising schedule. 0 is the beginning."
END_PERCENT_TOOLTIP = "Stop applying the operation at this fraction of the model's denoising schedule. 1 is the end."


@v3.v3_node("LatentApplyOperationCFG", category="model/latent/advanced/operations", experimental=True,
            python_module=MODULE,
            inputs=[v3.Socket("model", "MODEL"), v3.Socket("operation", "LATENT_OPERATION"),
                    v3.Float("start_percent", default=0.0, min=0.0, max=1.0, step=0.001, optional=True,
                             tooltip=START_PERCENT_TOOLTIP),
                    v3.Float("end_percent", default=1.0, min=0.0, max=1.0, step=0.001, optional=True,
                             tooltip=END_PERCENT_TOOLTIP)],
            outputs=[v3.Output("MODEL")])
def latent_apply_operation_cfg(model: Any, operation: Any, start_percent: float = 0.0,
                               end_percent: float = 1.0) -> tuple[Any]:
    """A clone of the model whose sampler applies `operation` to positive - negative before CFG
    (to the positive prediction alone when the negative is skipped), as a pre-CFG hook, at the
    steps whose sigma lies between the sigmas of `start_percent` and `end_percent` of the
    model's schedule (both ends included; the other steps untouched), as today's ComfyUI."""
    from comfy_core.latent.operations import OperationOnCFG

    model = checks.model(model)
    operation = _operation(operation)
    start = checks.number(start_percent, "start_percent", 0.0, 1.0)
    end = checks.number(end_percent, "end_percent", 0.0, 1.0)
    window = {}
    if (start, end) != (0.0, 1.0):  # the defaults cover every sigma: no model_sampling needed
        sampling = model.get_model_object("model_sampling")
        if not hasattr(sampling, "percent_to_sigma"):
            raise NodeInputError("model", "a MODEL with a sampling table (model_sampling.percent_to_sigma)",
                                 describe(sampling))
        window = {"sigma_start": float(sampling.percent_to_sigma(start)),
                  "sigma_end": float(sampling.percent_to_sigma(end))}
    patched = model.clone()
    patched.add_option_function("sampler_pre_cfg_function", OperationOnCFG(operation, **window))
    return (patched,)


@node("LatentOperationTonemapReinhard", display_name=None, category=CATEGORY, experimental=True, python_module=MODULE,
      inputs=[Float("multiplier", default=1.0, min=0.0, max=100.0, step=0.01)],
      outputs=[Output("LATENT_OPERATION")])
def latent_operation_tonemap_reinhard(multiplier: float) -> tuple[Any]:
    """An operation compressing latent vector lengths with Reinhard's curve, relative to
    (5 std + mean) of the lengths times `multiplier`."""
    from comfy_core.latent.operations import TonemapReinhard

    return (TonemapReinhard(float(_number(multiplier, "multiplier", 0.0))),)


@node("LatentOperationSharpen", display_name=None, category=CATEGORY, experimental=True, python_module=MODULE,
      inputs=[Int("sharpen_radius", default=9, min=1, max=31, step=1),
              Float("sigma", default=1.0, min=0.1, max=10.0, step=0.1),
              Float("alpha", default=0.1, min=0.0, max=5.0, step=0.01)],
      outputs=[Output("LATENT_OPERATION")])
def latent_operation_sharpen(sharpen_radius: int, sigma: float, alpha: float) -> tuple[Any]:
    """An operation sharpening the latent's directions with a (2 radius + 1)^2 unsharp mask of
    Gaussian `sigma` and strength `alpha`."""
    from comfy_core.latent.operations import Sharpen

    if isinstance(sharpen_radius, bool) or not isinstance(sharpen_radius, int) or sharpen_radius < 1:
        raise NodeInputError("sharpen_radius", "an int >= 1", repr(sharpen_radius))
    sigma = _number(sigma, "sigma", 0.0)
    if sigma == 0:
        raise NodeInputError("sigma", "a FLOAT > 0", repr(sigma))
    return (Sharpen(sharpen_radius, float(sigma), float(_number(alpha, "alpha", 0.0))),)
