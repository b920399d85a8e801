"""PreviewAny, ComfyUI's comfy_extras/nodes_preview_any.py (after rgthree-comfy's "Display Any"):
shows any value as text on the node in the editor and, as today's ComfyUI does, passes the text on
as a STRING output named "STRING" (today's templates link it, e.g. a prompt enhancer's text into
a text encoder). Today's file is in no stored commit; its output, display name and JSON indent are
from the templates (the output's name and type) and ComfyUI's embedded node docs 0.5.15
("Preview as Text", JSON with an indent of 4)."""
from __future__ import annotations

import json
from typing import Any

from graph.native import Input, Output, node

# What the node shows when a value cannot be turned into text (ComfyUI's words).
UNSERIALIZABLE = "source exists, but could not be serialized."


def preview_text(source: Any) -> str:
    """ComfyUI's text for a value: a string as it is; a number or boolean by str(); None as
    'None'; anything else as JSON (indented by 4, as today's ComfyUI) when it is JSON-serialisable,
    else by str()."""
    if source is None:
        return "None"
    if isinstance(source, str):
        return source
    if isinstance(source, (int, float, bool)):
        return str(source)
    try:
        return json.dumps(source, indent=4)
    except Exception:  # noqa: BLE001 -- any value may arrive; the fallback below is the point
        try:
            return str(source)
        except Exception:  # noqa: BLE001
            return UNSERIALIZABLE


@node("PreviewAny", category="utils", display_name="Preview as Text", output_node=True,
      python_module="comfy_extras.nodes_preview_any", inputs=[Input("source", "*")],
      outputs=[Output("STRING")])
def preview_any(source: Any = None) -> dict:
    """The editor shows the text in the node (`ui.text`); the same text is the STRING output."""
    text = preview_text(source)
    return {"ui": {"text": (text,)}, "result": (text,)}
