"""The 2026 guidance nodes of today's ComfyUI (comfy_extras/nodes_custom_sampler.py) in the
guiders category: CFGOverride and DualModelGuider.

- CFGOverride: a clone of the MODEL whose guider runs with a fixed `cfg` while the step's sigma is
  inside the [start_percent, end_percent) part of the schedule (a `predict_noise` wrapper,
  comfy_core/model_patches/cfg_override.py); the nearest override to the sampler wins where two
  overlap.
- DualModelGuider: a GUIDER running the positive pass on `model` and the negative pass on
  `model_negative` (comfy_core.sampling.guider.DualModelGuider); without `model_negative` it is
  the plain CFG guider, and without `negative` the negative pass gets an empty conditioning entry
  (no text tensor: the model runs image-only, for models that accept that).
"""
from __future__ import annotations

from typing import Any

import nodes.checks as checks
from graph.v3_schema import Float, Output, Socket, v3_node
from nodes.errors import NodeInputError, describe

MODULE = "comfy_extras.nodes_custom_sampler"
GUIDERS = "model/sampling/guiders"


def _cfg(default: float) -> Any:
    return Float("cfg", default=default, min=0.0, max=100.0, step=0.1, round=0.01)


def _percent(name: str, default: float) -> Any:
    return Float(name, default=default, min=0.0, max=1.0, step=0.001)


@v3_node("CFGOverride", display_name="CFG Override", category=GUIDERS, python_module=MODULE,
         description="Override cfg to a fixed value over a [start, end) percent (sigma) range. "
                     "With multiple overrides, the one nearest the sampler wins on overlap.",
         inputs=[Socket("model", "MODEL"), _cfg(1.0), _percent("start_percent", 0.0), _percent("end_percent", 1.0)],
         outputs=[Output("MODEL")])
def cfg_override(model: Any, cfg: float, start_percent: float, end_percent: float) -> tuple[Any]:
    """A clone of `model` with one more `predict_noise` wrapper setting the guider's cfg in range."""
    from comfy_core.model_patches.cfg_override import CFGOverride, override_sigma_range
    from comfy_core.wrappers import WrappersMP

    model = checks.model(model)
    cfg = checks.number(cfg, "cfg", 0.0, 100.0)
    start = checks.number(start_percent, "start_percent", 0.0, 1.0)
    end = checks.number(end_percent, "end_percent", 0.0, 1.0)
    sigma_lo, sigma_hi = override_sigma_range(model.get_model_object("model_sampling"), start, end)
    patched = model.clone()
    patched.add_wrapper_with_key(WrappersMP.PREDICT_NOISE, None, CFGOverride(float(cfg), sigma_lo, sigma_hi))
    return (patched,)


@v3_node("DualModelGuider", display_name="Dual Model CFG Guider", category=GUIDERS, python_module=MODULE,
         experimental=True,
         inputs=[Socket("model", "MODEL", tooltip="Model used for the positive (conditional) pass."),
                 Socket("model_negative", "MODEL", optional=True,
                        tooltip="Model used for the negative (unconditional) pass. Use the same model for "
                                "ordinary CFG."),
                 Socket("positive", "CONDITIONING"), _cfg(4.0),
                 Socket("negative", "CONDITIONING", optional=True,
                        tooltip="Negative conditioning run on the negative model. Leave unconnected for a text-free "
                                "(image-only) unconditional pass.")],
         outputs=[Output("GUIDER")])
def dual_model_guider(model: Any, positive: Any, cfg: float, model_negative: Any = None,
                      negative: Any = None) -> tuple[Any]:
    """The dual-model CFG guider, or the plain CFG guider when no negative model is linked."""
    from comfy_core.sampling.guider import CFGGuider, DualModelGuider

    model = checks.model(model)
    positive = checks.conditioning(positive, "positive")
    cfg = checks.number(cfg, "cfg", 0.0, 100.0)
    if negative is None:
        negative = [[None, {}]]  # an entry without a text tensor: the negative pass runs with no cross-attention
    else:
        negative = checks.conditioning(negative, "negative")
    if model_negative is None:
        guider = CFGGuider(model)
    else:
        if not (hasattr(model_negative, "applied") and hasattr(model_negative, "model")):
            raise NodeInputError("model_negative", "a MODEL of this engine", describe(model_negative))
        guider = DualModelGuider(model, model_negative)
    guider.set_conds(positive, negative)
    guider.set_cfg(float(cfg))
    return (guider,)
