"""ScaleROPE (today's ComfyUI, comfy_extras/nodes_rope.py; experimental): a MODEL clone whose
`transformer_options["rope_options"]` carry `scale_x`, `shift_x`, `scale_y`, `shift_y`, `scale_t`,
`shift_t`, as ComfyUI's `ModelPatcher.set_model_rope_options`. A network that honours them (Wan, as
ComfyUI's; comfy_core/attention/rope.py `rope_axis_positions`) spreads each axis of its RoPE
position ids over `(n - 1) * scale + 1` positions, moved by `shift`: ChronoEdit's template stretches
time 7x (its two frames are an edit, not neighbours). The input MODEL is not changed.
"""
from __future__ import annotations

from typing import Any

from graph.v3_schema import Float, Output, Socket, v3_node
import nodes.checks as checks

MODULE = "comfy_extras.nodes_rope"
SCALE = dict(default=1.0, min=0.0, max=100.0, step=0.1, advanced=True)
SHIFT = dict(default=0.0, min=-256.0, max=256.0, step=0.1, advanced=True)
AXES = ("x", "y", "t")


@v3_node("ScaleROPE", category="advanced/model_patches", python_module=MODULE, experimental=True,
         description="Scale and shift the ROPE of the model.",
         inputs=[Socket("model", "MODEL"),
                 *[spec for axis in AXES for spec in (Float(f"scale_{axis}", **SCALE), Float(f"shift_{axis}", **SHIFT))]],
         outputs=[Output("MODEL")])
def scale_rope(model: Any, scale_x: float, shift_x: float, scale_y: float, shift_y: float, scale_t: float,
               shift_t: float) -> tuple[Any]:
    """See the module docstring."""
    from comfy_core.attention.rope import with_rope_options

    model = checks.model(model)
    given = dict(scale_x=scale_x, shift_x=shift_x, scale_y=scale_y, shift_y=shift_y, scale_t=scale_t, shift_t=shift_t)
    values = {name: checks.number(value, name) for name, value in given.items()}
    patched = model.clone()
    patched.model_options["transformer_options"] = with_rope_options(
        patched.model_options.get("transformer_options"), **values)
    return (patched,)
