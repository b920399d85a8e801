"""ColorToRGBInt (ComfyUI's comfy_extras/nodes_color.py, 2026, "Color Picker"): a `#RRGGBB` or
`#RRGGBBAA` colour from the editor's colour widget as one RGB integer (R*65536 + G*256 + B), the
`#RRGGBB` text, and the alpha as 0..1 (1.0 without an alpha pair).
"""
from __future__ import annotations

from typing import Any

from graph.spec import REQUIRED, InputSpec
from graph.v3_schema import Output, v3_node
from nodes.errors import NodeInputError

MODULE = "comfy_extras.nodes_color"
_HEX = set("0123456789abcdefABCDEF")


def parse_color(color: Any) -> tuple[int, str, float]:
    if not isinstance(color, str) or len(color) not in (7, 9) or color[0] != "#" or not set(color[1:]) <= _HEX:
        raise NodeInputError("color", "a colour #RRGGBB or #RRGGBBAA", repr(color))
    alpha = int(color[7:9], 16) / 255.0 if len(color) == 9 else 1.0
    rgb = color[:7]
    return int(rgb[1:], 16), rgb, alpha


@v3_node("ColorToRGBInt", display_name="Color Picker", category="utilities", python_module=MODULE,
         description="Return a color RGB integer value and hexadecimal representation.",
         inputs=[InputSpec("color", "COLOR", REQUIRED, {"default": "#ffffff", "socketless": True})],
         outputs=[Output("INT", "rgb_int"), Output("COLOR", "hex"), Output("FLOAT", "alpha")])
def color_to_rgb_int(color: str) -> tuple[int, str, float]:
    return parse_color(color)
