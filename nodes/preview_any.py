"""PreviewAny, ComfyUI's comfy_extras/nodes_preview_any.py (0.3.64; after rgthree-comfy's
"Display Any"): shows any value as text on the node in the editor."""
from __future__ import annotations

import json
from typing import Any

from graph.native import Input, node

# What the node shows when a value cannot be turned into text (ComfyUI's words).
UNSERIALIZABLE = "source exists, but could not be serialized."


def preview_text(source: Any) -> str:
    """ComfyUI's text for a value: a string as it is; a number or boolean by str(); None as
    'None'; anything else as JSON when it is JSON-serialisable, else by str()."""
    if source is None:
        return "None"
    if isinstance(source, str):
        return source
    if isinstance(source, (int, float, bool)):
        return str(source)
    try:
        return json.dumps(source)
    except Exception:  # noqa: BLE001 -- any value may arrive; the fallback below is the point
        try:
            return str(source)
        except Exception:  # noqa: BLE001
            return UNSERIALIZABLE


@node("PreviewAny", category="utils", display_name="Preview Any", output_node=True,
      python_module="comfy_extras.nodes_preview_any", inputs=[Input("source", "*")])
def preview_any(source: Any = None) -> dict:
    """`{"ui": {"text": [text]}}`: the editor shows the text in the node."""
    return {"ui": {"text": (preview_text(source),)}}
