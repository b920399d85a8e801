"""ResolutionSelector (ComfyUI's comfy_extras/nodes_resolution.py, 2026): width and height for an
aspect ratio and a megapixel budget, each rounded to the nearest multiple of `multiple`.
`preview` is the editor's live read-out of the result (it reads the three widgets named in its
options); it carries no value here.
"""
from __future__ import annotations

import math
from typing import Any

from graph.v3_schema import Combo, Float, Int, Output, Widget, v3_node
from nodes.errors import NodeInputError

MODULE = "comfy_extras.nodes_resolution"
ASPECT_RATIOS: dict[str, tuple[int, int]] = {
    "1:1 (Square)": (1, 1), "3:2 (Photo)": (3, 2), "4:3 (Standard)": (4, 3), "16:9 (Widescreen)": (16, 9),
    "21:9 (Ultrawide)": (21, 9), "2:3 (Portrait Photo)": (2, 3), "3:4 (Portrait Standard)": (3, 4),
    "9:16 (Portrait Widescreen)": (9, 16),
}


def resolution(aspect_ratio: str, megapixels: float, multiple: int) -> tuple[int, int]:
    """(width, height) with the ratio's proportions and about `megapixels` * 2^20 pixels."""
    w_ratio, h_ratio = ASPECT_RATIOS[aspect_ratio]
    scale = math.sqrt(megapixels * 1024 * 1024 / (w_ratio * h_ratio))
    return round(w_ratio * scale / multiple) * multiple, round(h_ratio * scale / multiple) * multiple


@v3_node("ResolutionSelector", display_name="Resolution Selector", category="utilities", python_module=MODULE,
         description="Calculate width and height from aspect ratio and megapixel target. Useful for setting up "
                     "Empty Latent Image dimensions.",
         inputs=[Combo("aspect_ratio", list(ASPECT_RATIOS), default="1:1 (Square)",
                       tooltip="The aspect ratio for the output dimensions."),
                 Float("megapixels", default=1.0, min=0.1, max=16.0, step=0.1,
                       tooltip="Target total megapixels. 1.0 MP \u2248 1024\u00d71024 for square."),
                 Widget("preview", "RESOLUTION_PREVIEW", optional=True,
                        tooltip="Live preview of the calculated output resolution.",
                        ratio_widget="aspect_ratio", megapixels_widget="megapixels", multiple_widget="multiple"),
                 Int("multiple", default=8, min=8, max=128, step=4, advanced=True,
                     tooltip="Nearest multiple of the result to set the selected resolution to.")],
         outputs=[Output("INT", "width", tooltip="Calculated width in pixels, rounded to the selected multiple."),
                  Output("INT", "height", tooltip="Calculated height in pixels, rounded to the selected multiple.")])
def resolution_selector(aspect_ratio: str, megapixels: float, multiple: int, preview: Any = None) -> tuple[int, int]:
    if aspect_ratio not in ASPECT_RATIOS:
        raise NodeInputError("aspect_ratio", f"one of {list(ASPECT_RATIOS)}", repr(aspect_ratio))
    return resolution(aspect_ratio, float(megapixels), int(multiple))
