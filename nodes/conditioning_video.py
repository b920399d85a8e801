"""ConditioningSetAreaPercentageVideo, ComfyUI's comfy_extras/nodes_video_model.py (0.3.64): an
area in fractions of a video latent, frames (temporal, z) included.

Like ConditioningSetAreaPercentage (nodes/conditioning_ops.py) it only writes options into a
copy of every entry's dict: `area = ("percentage", temporal, height, width, z, y, x)`,
`strength`, `set_area_to_bounds = False`, exactly as ComfyUI. ComfyUI's sampler reads such an
area as sizes (first half) and offsets (second half), one per latent axis from the first
axis after the channels (comfy/samplers.py get_area_and_mult); our sampler
(comfy_core/sampling/conditioning.py) resolves only the 4-fraction image form so far.
"""
from __future__ import annotations

import math
from typing import Any

from graph.native import Float, Input, Output, node
import nodes.checks as checks
from nodes.errors import NodeInputError


def _fraction(value: Any, input_name: str, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or not 0 <= value <= high:
        raise NodeInputError(input_name, f"a FLOAT in 0..{high}", repr(value))
    return value


@node("ConditioningSetAreaPercentageVideo", category="conditioning", python_module="comfy_extras.nodes_video_model",
      inputs=[Input("conditioning", "CONDITIONING"),
              Float("width", default=1.0, min=0, max=1.0, step=0.01),
              Float("height", default=1.0, min=0, max=1.0, step=0.01),
              Float("temporal", default=1.0, min=0, max=1.0, step=0.01),
              Float("x", default=0, min=0, max=1.0, step=0.01),
              Float("y", default=0, min=0, max=1.0, step=0.01),
              Float("z", default=0, min=0, max=1.0, step=0.01),
              Float("strength", default=1.0, min=0.0, max=10.0, step=0.01)],
      outputs=[Output("CONDITIONING")])
def conditioning_set_area_percentage_video(conditioning: list, width: float, height: float, temporal: float,
                                           x: float, y: float, z: float, strength: float) -> tuple[list]:
    """Every entry's area set to the given fractions of the latent (frames, height, width)."""
    from comfy_core.text_encoders.conditioning import set_values

    conditioning = checks.conditioning(conditioning)
    given = {"width": width, "height": height, "temporal": temporal, "x": x, "y": y, "z": z}
    f = {name: _fraction(value, name, 1.0) for name, value in given.items()}
    # No upper bound beyond the widget's: a linked strength above 10 works in ComfyUI too.
    strength = _fraction(strength, "strength", math.inf)
    area = ("percentage", f["temporal"], f["height"], f["width"], f["z"], f["y"], f["x"])
    return (set_values(conditioning, {"area": area, "strength": strength, "set_area_to_bounds": False}),)
