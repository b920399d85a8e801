"""ImageColorSpace, "Convert Image Color Space" (today's ComfyUI, comfy_extras/nodes_images.py,
2026, the version with "linear" among its spaces): an IMAGE re-encoded between sRGB, linear
Rec.709, HDR (Rec.2020 HLG) and HDR PQ (Rec.2020 PQ), e.g. before a save node set to the same
colour space. The conversions are comfy_core/image/color_space.py (the standards' formulas, the
203-nit SDR white and 1000-nit HLG display, batch-wide tone mapping and gamut compression when
narrowing); straight alpha is passed on unchanged. The result is float32 on the CPU, this
runtime's intermediate device and dtype.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from graph.v3_schema import Combo, Output, Socket, v3_node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe

if TYPE_CHECKING:
    import torch

MODULE = "comfy_extras.nodes_images"
# Kept here (not imported from comfy_core.image.color_space, which imports torch) so that
# registering the node and rendering /object_info stay torch-free.
SPACES = ["sRGB", "HDR", "HDR PQ", "linear"]

DESCRIPTION = (
    "Convert sRGB, linear Rec.709, HDR (Rec.2020 HLG), and HDR PQ (Rec.2020 PQ). Linear 1.0 uses the same 203-nit "
    "reference white as sRGB; HLG uses a 1000-nit reference display. Linear output and linear-to-HDR conversions "
    "preserve extended values without tone mapping. SDR output and PQ-to-HLG conversion tone-map excess luminance "
    "across the batch and compress out-of-gamut colors. Conversions compute in float32 and return the intermediate "
    "device and dtype. Straight alpha is not color-transformed.")


@v3_node("ImageColorSpace", display_name="Convert Image Color Space", category="image/color", python_module=MODULE,
         description=DESCRIPTION,
         inputs=[Socket("image", "IMAGE"),
                 Combo("source", SPACES, default="sRGB", tooltip="Color space of the input pixels."),
                 Combo("destination", SPACES, default="sRGB",
                       tooltip="Color space of the output pixels. Set the save node to this same color space.")],
         outputs=[Output("IMAGE")])
def image_color_space(image: torch.Tensor, source: str, destination: str) -> tuple[torch.Tensor]:
    """`image` converted from `source` to `destination` (see the module docstring)."""
    from comfy_core.image.color_space import convert_color_space

    image = checks.image_batch(image, "image")
    if image.shape[-1] not in (3, 4):
        raise NodeInputError("image", "an RGB or RGBA IMAGE [B, H, W, 3 or 4]", describe(image))
    for name, value in (("source", source), ("destination", destination)):
        if value not in SPACES:
            raise NodeInputError(name, f"one of {SPACES}", repr(value))
    return (convert_color_space(image, source, destination).cpu(),)
