"""ComfyUI 0.3.64's guidance patch nodes: CFGZeroStar and CFGNorm (comfy_extras/nodes_cfg.py; CFGNorm as
today's V3 declaration, with `pre_cfg`),
APG (nodes_apg.py), Mahiro (nodes_mahiro.py), TCFG (nodes_tcfg.py) and Epsilon Scaling
(nodes_eps.py). Each returns a clone of the MODEL with one more CFG hook
(`comfy_core/sampling/cfg_patches.py`); the input MODEL is never changed.
"""
from __future__ import annotations

import math
from typing import Any

from graph import v3_schema as v3
from graph.native import Float, Input, Output, node
import nodes.checks as checks
from nodes.errors import NodeInputError

# torch and comfy_core are imported inside the functions that run: registering these nodes and
# rendering /object_info must not import torch (server start-up).


def _number(value: Any, input_name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise NodeInputError(input_name, "a FLOAT", repr(value))
    return float(value)


def _post(model: Any, hook: Any) -> tuple[Any]:
    patched = checks.model(model).clone()
    patched.add_option_function("sampler_post_cfg_function", hook)
    return (patched,)


def _pre(model: Any, hook: Any) -> tuple[Any]:
    patched = checks.model(model).clone()
    patched.add_option_function("sampler_pre_cfg_function", hook)
    return (patched,)


@node("CFGZeroStar", display_name=None, category="advanced/guidance", python_module="comfy_extras.nodes_cfg",
      inputs=[Input("model", "MODEL")], outputs=[Output("MODEL", "patched_model")])
def cfg_zero_star(model: Any) -> tuple[Any]:
    """CFG-Zero*: guidance from the negative scaled by its optimised projection coefficient."""
    from comfy_core.sampling.cfg_patches import CFGZeroStar

    return _post(model, CFGZeroStar())


# Today's ComfyUI (comfy_extras/nodes_cfg.py@dd2bb6793162a00e7c8cc9b8b463a8cb353eaa17) declares CFGNorm with
# the V3 schema and an optional `pre_cfg` switch (tooltip quoted from there).
CFG_NORM_PRE_CFG_TOOLTIP = ("If true, rescale the combined noise BEFORE the sampler's CFG combine, without clamping "
                            "(can amplify). Matches the norm-scaled CFG used by models like Lens. Default false keeps "
                            "the original post-CFG x0-space attenuate-only behavior.")


@v3.v3_node("CFGNorm", category="advanced/guidance", python_module="comfy_extras.nodes_cfg", experimental=True,
            inputs=[v3.Socket("model", "MODEL"), v3.Float("strength", default=1.0, min=0.0, max=100.0, step=0.01),
                    v3.Boolean("pre_cfg", default=False, optional=True, tooltip=CFG_NORM_PRE_CFG_TOOLTIP)],
            outputs=[v3.Output("MODEL", "patched_model")])
def cfg_norm(model: Any, strength: float, pre_cfg: bool = False) -> tuple[Any]:
    """ComfyUI's CFGNorm: by default a post-CFG hook capping the guided x0 prediction's channel
    norm at the positive's, times `strength`; with `pre_cfg` the MODEL's `sampler_cfg_function`
    instead, rescaling the combined noise prediction to the positive's norm (unclamped) and
    blending back to plain CFG by `strength` (comfy_core/sampling/cfg_patches.py)."""
    from comfy_core.sampling.cfg_patches import CFGNorm, CFGNormPreCFG

    strength = _number(strength, "strength")
    if not isinstance(pre_cfg, bool):
        raise NodeInputError("pre_cfg", "a BOOLEAN", repr(pre_cfg))
    if pre_cfg:
        patched = checks.model(model).clone()
        patched.set_option("sampler_cfg_function", CFGNormPreCFG(strength))
        return (patched,)
    return _post(model, CFGNorm(strength))


@node("APG", display_name="Adaptive Projected Guidance", category="sampling/custom_sampling",
      python_module="comfy_extras.nodes_apg",
      inputs=[Input("model", "MODEL"),
              Float("eta", default=1.0, min=-10.0, max=10.0, step=0.01,
                    tooltip="Controls the scale of the parallel guidance vector. Default CFG behavior at a setting of 1."),
              Float("norm_threshold", default=5.0, min=0.0, max=50.0, step=0.1,
                    tooltip="Normalize guidance vector to this value, normalization disable at a setting of 0."),
              Float("momentum", default=0.0, min=-5.0, max=1.0, step=0.01,
                    tooltip="Controls a running average of guidance during diffusion, disabled at a setting of 0.")],
      outputs=[Output("MODEL")])
def apg(model: Any, eta: float, norm_threshold: float, momentum: float) -> tuple[Any]:
    """Adaptive projected guidance: the guidance's part parallel to the positive scaled by `eta`."""
    from comfy_core.sampling.cfg_patches import APG

    return _pre(model, APG(_number(eta, "eta"), _number(norm_threshold, "norm_threshold"),
                           _number(momentum, "momentum")))


@node("Mahiro", display_name="Mahiro is so cute that she deserves a better guidance function!! (。・ω・。)",
      category="_for_testing", python_module="comfy_extras.nodes_mahiro", experimental=True,
      description="Modify the guidance to scale more on the 'direction' of the positive prompt rather than "
                  "the difference between the negative prompt.",
      inputs=[Input("model", "MODEL")], outputs=[Output("MODEL", "patched_model")])
def mahiro(model: Any) -> tuple[Any]:
    """The CFG result blended with the scaled positive by a cosine similarity."""
    from comfy_core.sampling.cfg_patches import Mahiro

    return _post(model, Mahiro())


@node("TCFG", display_name="Tangential Damping CFG", category="advanced/guidance",
      python_module="comfy_extras.nodes_tcfg",
      description="TCFG – Tangential Damping CFG (2503.18137)\n\nRefine the uncond (negative) to align with "
                  "the cond (positive) for improving quality.",
      inputs=[Input("model", "MODEL")], outputs=[Output("MODEL", "patched_model")])
def tcfg(model: Any) -> tuple[Any]:
    """The negative prediction's tangential part (w.r.t. the positive) removed before CFG."""
    from comfy_core.sampling.cfg_patches import TCFG

    return _pre(model, TCFG())


@node("Epsilon Scaling", display_name=None, category="model_patches/unet", python_module="comfy_extras.nodes_eps",
      inputs=[Input("model", "MODEL"),
              Float("scaling_factor", default=1.005, min=0.5, max=1.5, step=0.001, display="number")],
      outputs=[Output("MODEL")])
def epsilon_scaling(model: Any, scaling_factor: float) -> tuple[Any]:
    """The guided noise prediction divided by `scaling_factor` (0 is treated as 1e-9, as ComfyUI)."""
    from comfy_core.sampling.cfg_patches import EpsilonScaling

    factor = _number(scaling_factor, "scaling_factor")
    return _post(model, EpsilonScaling(1e-9 if factor == 0 else factor))
