"""Skip-Layer Guidance nodes for DiT models with ComfyUI 0.3.64's names, sockets and semantics
(comfy_extras/nodes_slg.py): SkipLayerGuidanceDiT and SkipLayerGuidanceDiTSimple. SkipLayerGuidanceSD3
(nodes/sd3_nodes.py) is SkipLayerGuidanceDiT on double blocks.

Both return a clone of the MODEL carrying one sampler hook from
comfy_core/model_patches/skip_layer_guidance.py; the layer lists are every run of digits in the
strings (ComfyUI's parsing); with no layer at all the MODEL is returned as it is. The percent range
becomes a sigma range through the MODEL's sampling table when the node runs (as ComfyUI: a
ModelSampling node applied after this one does not move the range).
"""
from __future__ import annotations

from typing import Any

from graph.native import Float, Input, Output, node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe

# torch and comfy_core are imported inside the functions that run: registering these nodes and
# rendering /object_info must not import torch (server start-up).

MODULE = "comfy_extras.nodes_slg"
CATEGORY = "advanced/guidance"


def _layers(value: Any, input_name: str) -> tuple[int, ...]:
    from comfy_core.model_patches.skip_layer_guidance import parse_layers

    return parse_layers(checks.text(value, input_name))


def _sigma_range(model: Any, start_percent: Any, end_percent: Any) -> tuple[float, float]:
    """(sigma at start_percent, sigma at end_percent) of the MODEL's sampling table."""
    start = checks.number(start_percent, "start_percent", 0.0, 1.0)
    end = checks.number(end_percent, "end_percent", 0.0, 1.0)
    get = getattr(model, "get_model_object", None)
    model_sampling = get("model_sampling") if get is not None else None
    if not hasattr(model_sampling, "percent_to_sigma"):
        raise NodeInputError("model", "a MODEL with a sampling table (model_sampling.percent_to_sigma)",
                             describe(model_sampling))
    return float(model_sampling.percent_to_sigma(start)), float(model_sampling.percent_to_sigma(end))


def _layer_input(name: str) -> Any:
    return Input(name, "STRING", default="7, 8, 9", multiline=False)


def skip_layer_guidance(model: Any, scale: float, start_percent: float, end_percent: float,
                        double_layers: str = "", single_layers: str = "", rescaling_scale: float = 0.0) -> tuple[Any]:
    """The body of SkipLayerGuidanceDiT (also SkipLayerGuidanceSD3's), in ComfyUI's `execute` order."""
    from comfy_core.model_patches.skip_layer_guidance import SkipLayerGuidance

    model = checks.model(model)
    scale = float(checks.number(scale, "scale"))
    rescaling_scale = float(checks.number(rescaling_scale, "rescaling_scale"))
    sigma_start, sigma_end = _sigma_range(model, start_percent, end_percent)
    double, single = _layers(double_layers, "double_layers"), _layers(single_layers, "single_layers")
    if not double and not single:
        return (model,)
    patched = model.clone()
    patched.add_option_function("sampler_post_cfg_function",
                                SkipLayerGuidance(double, single, scale, sigma_start, sigma_end, rescaling_scale))
    return (patched,)


@node("SkipLayerGuidanceDiT", display_name=None, category=CATEGORY, python_module=MODULE, experimental=True,
      description="Generic version of SkipLayerGuidance node that can be used on every DiT model.",
      inputs=[Input("model", "MODEL"), _layer_input("double_layers"), _layer_input("single_layers"),
              Float("scale", default=3.0, min=0.0, max=10.0, step=0.1),
              Float("start_percent", default=0.01, min=0.0, max=1.0, step=0.001),
              Float("end_percent", default=0.15, min=0.0, max=1.0, step=0.001),
              Float("rescaling_scale", default=0.0, min=0.0, max=10.0, step=0.01)],
      outputs=[Output("MODEL")])
def skip_layer_guidance_dit(model: Any, scale: float, start_percent: float, end_percent: float,
                            double_layers: str = "", single_layers: str = "",
                            rescaling_scale: float = 0.0) -> tuple[Any]:
    """A post-CFG hook adding `(cond - cond with the listed blocks skipped) * scale` between
    start_percent and end_percent, then rescaling by `rescaling_scale` (0: none). The parameters
    are in ComfyUI's `execute` order (packs call it positionally), not the sockets' order."""
    return skip_layer_guidance(model, scale, start_percent, end_percent, double_layers, single_layers,
                               rescaling_scale)


@node("SkipLayerGuidanceDiTSimple", display_name=None, category=CATEGORY, python_module=MODULE,
      experimental=True,
      description="Simple version of the SkipLayerGuidanceDiT node that only modifies the uncond pass.",
      inputs=[Input("model", "MODEL"), _layer_input("double_layers"), _layer_input("single_layers"),
              Float("start_percent", default=0.0, min=0.0, max=1.0, step=0.001),
              Float("end_percent", default=1.0, min=0.0, max=1.0, step=0.001)],
      outputs=[Output("MODEL")])
def skip_layer_guidance_dit_simple(model: Any, start_percent: float, end_percent: float,
                                   double_layers: str = "", single_layers: str = "") -> tuple[Any]:
    """A cond-batch hook: between start_percent and end_percent the negative prediction comes
    from the model with the listed blocks skipped (CFG then guides away from it)."""
    from comfy_core.model_patches.skip_layer_guidance import SkipLayerUncond

    model = checks.model(model)
    sigma_start, sigma_end = _sigma_range(model, start_percent, end_percent)
    double, single = _layers(double_layers, "double_layers"), _layers(single_layers, "single_layers")
    if not double and not single:
        return (model,)
    patched = model.clone()
    patched.set_option("sampler_calc_cond_batch_function", SkipLayerUncond(double, single, sigma_start, sigma_end))
    return (patched,)
