"""CLIPTextEncodePixArtAlpha with ComfyUI 0.3.64's name, sockets and semantics
(comfy_extras/nodes_pixart.py): the text encoded as CLIPTextEncode does, with the target `width`
and `height` in every entry (PixArt Alpha's resolution conditioning; Sigma ignores them).
"""
from __future__ import annotations

from typing import Any

from graph.native import MAX_RESOLUTION, Input, Int, Output, String, node
import nodes.checks as checks


@node("CLIPTextEncodePixArtAlpha", display_name=None, category="advanced/conditioning",
      python_module="comfy_extras.nodes_pixart",
      description="Encodes text and sets the resolution conditioning for PixArt Alpha. Does not apply to PixArt Sigma.",
      inputs=[Int("width", default=1024, min=0, max=MAX_RESOLUTION), Int("height", default=1024, min=0, max=MAX_RESOLUTION),
              String("text", default=None, multiline=True, dynamicPrompts=True), Input("clip", "CLIP")],
      outputs=[Output("CONDITIONING")])
def clip_text_encode_pixart_alpha(width: int, height: int, text: str, clip: Any) -> tuple[list]:
    from nodes.conditioning import clip_text_encode

    width = checks.integer(width, "width", 0, MAX_RESOLUTION)
    height = checks.integer(height, "height", 0, MAX_RESOLUTION)
    (conditioning,) = clip_text_encode(text, clip)
    return ([[cond, {**options, "width": width, "height": height}] for cond, options in conditioning],)
