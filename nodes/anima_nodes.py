"""AnimaLLLiteApply (today's ComfyUI, comfy_extras/nodes_model_patch.py, a V1 node, EXPERIMENTAL):
an Anima LLLite MODEL_PATCH (ModelPatchLoader) on an Anima MODEL
(comfy_core/model_patches/anima_lllite.py). The control image's first three channels steer the
self-attention q / k / v, cross-attention q and MLP inputs of the DiT blocks by `strength`,
between `start_percent` and `end_percent` of the schedule; the inpainting patch (4 input channels)
also reads `mask` (1 = regenerate; none given: all zeros), a 3-channel patch ignores it.

Differences from ComfyUI, by house rule (bad input is an error): a MODEL_PATCH of another kind, or
a model that is not an Anima DiT as wide as the patch's modules, is a node error (ComfyUI fails
inside sampling).
"""
from __future__ import annotations

from typing import Any

from graph.native import Float, Input, Output, node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe

# torch and comfy_core are imported inside the functions that run (registration must not import torch).

MODULE = "comfy_extras.nodes_model_patch"


@node("AnimaLLLiteApply", display_name="Apply Anima LLLite", category="model/patch/anima", python_module=MODULE,
      experimental=True,
      inputs=[Input("model", "MODEL"), Input("model_patch", "MODEL_PATCH"), Input("image", "IMAGE"),
              Float("strength", default=1.0, min=-10.0, max=10.0, step=0.01),
              Float("start_percent", default=0.0, min=0.0, max=1.0, step=0.001),
              Float("end_percent", default=1.0, min=0.0, max=1.0, step=0.001),
              Input("mask", "MASK", optional=True)],
      outputs=[Output("MODEL")])
def anima_lllite_apply(model: Any, model_patch: Any, image: Any, strength: float, start_percent: float,
                       end_percent: float, mask: Any = None) -> tuple[Any]:
    """A clone of the Anima MODEL with the LLLite patch's four hooks."""
    from comfy_core.model_patches.anima_lllite import AnimaLLLite, apply_anima_lllite

    model = checks.model(model)
    network = getattr(model_patch, "model", None)
    if not isinstance(network, AnimaLLLite) or not hasattr(model_patch, "applied"):
        raise NodeInputError("model_patch", "an Anima LLLite MODEL_PATCH (ModelPatchLoader)",
                             describe(network if network is not None else model_patch))
    image = checks.image_batch(image, "image")
    strength = checks.number(strength, "strength", -10.0, 10.0)
    start = checks.number(start_percent, "start_percent", 0.0, 1.0)
    end = checks.number(end_percent, "end_percent", 0.0, 1.0)
    mask = None if mask is None else checks.mask_batch(mask, "mask")
    family = getattr(getattr(model.model, "family", None), "name", None)
    dit = getattr(model.model, "diffusion_model", None)
    width = getattr(getattr(dit, "config", None), "model_channels", None)
    blocks = len(getattr(dit, "blocks", ()))
    if family != "anima" or width != network.config.model_dim or blocks < network.config.block_count:
        raise NodeInputError("model", f"an Anima model of width {network.config.model_dim} with at least "
                             f"{network.config.block_count} blocks (the LLLite patch's)",
                             f"a {family} model of width {width} and {blocks} blocks")
    return (apply_anima_lllite(model, model_patch, image, mask, strength, start, end),)
