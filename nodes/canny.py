"""Canny, ComfyUI 0.3.64's edge-detection preprocessor (`comfy_extras/nodes_canny.py`): edges of
each image as a white-on-black IMAGE, computed by `comfy_core.image.canny` (kornia's conventions,
which ComfyUI's node uses; the thresholds are passed as they are)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from graph.native import Float, Input, Output, node
import nodes.checks as checks
from nodes.errors import NodeInputError

if TYPE_CHECKING:
    import torch


@node("Canny", display_name=None, category="image/preprocessors", python_module="comfy_extras.nodes_canny",
      inputs=[Input("image", "IMAGE"), Float("low_threshold", default=0.4, min=0.01, max=0.99, step=0.01),
              Float("high_threshold", default=0.8, min=0.01, max=0.99, step=0.01)],
      outputs=[Output("IMAGE")])
def canny(image: torch.Tensor, low_threshold: float, high_threshold: float) -> tuple[torch.Tensor]:
    """[B, H, W, C] -> [B, H, W, 3] edges of 0 and 1."""
    from comfy_core.image.canny import canny as detect

    image = checks.image_batch(image, "image")
    if image.shape[-1] not in (1, 3):
        raise NodeInputError("image", "an IMAGE with 1 or 3 channels", f"{image.shape[-1]} channels")
    low = checks.number(low_threshold, "low_threshold", 0.0)
    high = checks.number(high_threshold, "high_threshold", 0.0)
    if not 0 < low <= high:
        raise NodeInputError("low_threshold", f"a value in (0, high_threshold = {high}]", repr(low))
    _magnitude, edges = detect(image.movedim(-1, 1), float(low), float(high))
    return (edges.repeat(1, 3, 1, 1).movedim(1, -1),)
