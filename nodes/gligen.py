"""GLIGEN nodes with ComfyUI 0.3.64's names, sockets and semantics (`nodes.py`): GLIGENLoader,
GLIGENTextBoxApply.

GLIGENLoader reads a file from the `gligen` model folder (comfy_core/gligen/load.py) into the
GLIGEN wire object, a patcher over the grounding model. GLIGENTextBoxApply encodes the box's text
(the CLIP's unprojected pooled output) and appends `(embedding, h, w, y, x)` in latent units
(pixels // 8) to every entry's `gligen = ("position", model, [boxes...])`; while sampling, the
model's gated self-attention runs as the UNet's `middle_patch` (comfy_core/sampling/conditioning.py).
"""
from __future__ import annotations

from typing import Any

from graph.native import MAX_RESOLUTION, Combo, Input, Int, Output, String, node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe
from nodes.loaders import _files
from nodes.environment import model_file

# torch is imported inside the functions that run: registering these nodes and rendering
# /object_info must not import it (server start-up).


@node("GLIGENLoader", category="loaders", display_name="GLIGENLoader",
      inputs=[Combo("gligen_name", _files("gligen"))], outputs=[Output("GLIGEN")])
def gligen_loader(gligen_name: str) -> tuple[Any]:
    """A GLIGEN file (position net + gated self-attention fusers) -> GLIGEN."""
    from comfy_core.checkpoint.errors import CheckpointError
    from comfy_core.gligen.load import load_gligen
    from nodes.environment import current_env

    env = current_env()
    device = getattr(env.memory, "device", None)
    try:
        gligen = load_gligen(model_file("gligen", gligen_name, "gligen_name"), load_device=device, offload_device="cpu")
    except CheckpointError as exc:
        raise NodeInputError("gligen_name", "a GLIGEN model file", str(exc)) from None
    if env.memory is not None:
        env.memory.track(gligen)
    return (gligen,)


def _gligen(value: Any) -> Any:
    if not callable(getattr(getattr(value, "model", None), "set_position", None)):
        raise NodeInputError("gligen_textbox_model", "a GLIGEN model (from GLIGENLoader)", describe(value))
    return value


@node("GLIGENTextBoxApply", category="conditioning/gligen", display_name="GLIGENTextBoxApply",
      inputs=[Input("conditioning_to", "CONDITIONING"), Input("clip", "CLIP"),
              Input("gligen_textbox_model", "GLIGEN"), String("text", default=None, multiline=True, dynamicPrompts=True),
              Int("width", default=64, min=8, max=MAX_RESOLUTION, step=8),
              Int("height", default=64, min=8, max=MAX_RESOLUTION, step=8),
              Int("x", default=0, min=0, max=MAX_RESOLUTION, step=8),
              Int("y", default=0, min=0, max=MAX_RESOLUTION, step=8)],
      outputs=[Output("CONDITIONING")])
def gligen_textbox_apply(conditioning_to: list, clip: Any, gligen_textbox_model: Any, text: str, width: int,
                         height: int, x: int, y: int) -> tuple[list]:
    """Ground `text` in the box (x, y, width, height) pixels, added to the boxes already there."""
    conditioning_to = checks.conditioning(conditioning_to, "conditioning_to")
    clip = checks.clip(clip)
    gligen = _gligen(gligen_textbox_model)
    text = checks.text(text)
    width = checks.integer(width, "width", 8)
    height = checks.integer(height, "height", 8)
    x = checks.integer(x, "x", 0)
    y = checks.integer(y, "y", 0)
    _cond, pooled = clip.encode_from_tokens(clip.tokenize(text), return_pooled="unprojected")
    box = (pooled, height // 8, width // 8, y // 8, x // 8)
    out = []
    for tensor, options in conditioning_to:
        updated = dict(options)
        previous = list(options["gligen"][2]) if "gligen" in options else []
        updated["gligen"] = ("position", gligen, previous + [box])
        out.append([tensor, updated])
    return (out,)
