"""Morphology and YCbCr nodes: ComfyUI's `comfy_extras.nodes_morphology` (Morphology,
ImageRGBToYUV, ImageYUVToRGB).

Names, sockets and semantics are ComfyUI 0.3.64's, written here on torch (ComfyUI calls kornia,
which this engine does not depend on); the maths is in comfy_core/image/morphology.py and
comfy_core/image/color.py. Results stay on the input's device.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from comfy_core.image.names import MORPHOLOGY_OPERATIONS as OPERATIONS
from graph.native import Combo, Input, Int, Output, node
import nodes.checks as checks
from nodes.errors import NodeInputError
from nodes.mask import offset

if TYPE_CHECKING:
    import torch

# torch is imported inside the functions that run: registering these nodes and rendering
# /object_info must not import it (server start-up).

MODULE = "comfy_extras.nodes_morphology"
KERNEL_MIN, KERNEL_MAX = 3, 999


def _rgb(image: object, input_name: str) -> torch.Tensor:
    image = checks.image_batch(image, input_name)
    if image.shape[-1] != 3:
        raise NodeInputError(input_name, "an RGB IMAGE (3 channels)", f"{image.shape[-1]} channel(s)")
    return image


@node("Morphology", category="image/postprocessing", display_name="ImageMorphology", python_module=MODULE,
      inputs=[Input("image", "IMAGE"), Combo("operation", OPERATIONS),
              Int("kernel_size", default=3, min=KERNEL_MIN, max=KERNEL_MAX, step=1)],
      outputs=[Output("IMAGE")])
def morphology(image: torch.Tensor, operation: str, kernel_size: int) -> tuple[torch.Tensor]:
    """Grey-scale `operation` of every channel (alpha included) with a flat
    kernel_size x kernel_size square: erode, dilate, open, close, gradient (dilate - erode),
    top_hat (image - open), bottom_hat (close - image)."""
    from comfy_core.image.morphology import OPERATIONS as OPS

    image = checks.image_batch(image, "image")
    operation = checks.choice(operation, OPERATIONS, "operation")
    if offset(kernel_size, "kernel_size") < 1:
        raise NodeInputError("kernel_size", "an int >= 1", repr(kernel_size))
    return (OPS[operation](image.movedim(-1, 1), kernel_size).movedim(1, -1),)


@node("ImageRGBToYUV", display_name=None, category="image/batch", python_module=MODULE,
      inputs=[Input("image", "IMAGE")], outputs=[Output("IMAGE", "Y"), Output("IMAGE", "U"), Output("IMAGE", "V")])
def image_rgb_to_yuv(image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The Y (luma), U (Cb) and V (Cr) planes of an RGB image, each as a grey RGB image
    (the plane broadcast over three channels, as ComfyUI)."""
    from comfy_core.image.color import rgb_to_ycbcr

    image = _rgb(image, "image")
    planes = rgb_to_ycbcr(image)  # [B, H, W, 3]
    return tuple(planes[..., i:i + 1].expand_as(image) for i in range(3))


@node("ImageYUVToRGB", display_name=None, category="image/batch", python_module=MODULE,
      inputs=[Input("Y", "IMAGE"), Input("U", "IMAGE"), Input("V", "IMAGE")], outputs=[Output("IMAGE")])
def image_yuv_to_rgb(Y: torch.Tensor, U: torch.Tensor, V: torch.Tensor) -> tuple[torch.Tensor]:  # noqa: N803
    """The RGB image of Y, U and V planes, each read as the mean of its image's channels."""
    import torch

    from comfy_core.image.color import ycbcr_to_rgb

    planes = {"Y": checks.image_batch(Y, "Y"), "U": checks.image_batch(U, "U"), "V": checks.image_batch(V, "V")}
    for name in ("U", "V"):
        if planes[name].shape[:3] != planes["Y"].shape[:3]:
            raise NodeInputError(name, f"an IMAGE of Y's batch and size {list(planes['Y'].shape[:3])}",
                                 f"{list(planes[name].shape[:3])}")
    stacked = torch.cat([p.mean(dim=-1, keepdim=True) for p in planes.values()], dim=-1)  # [B, H, W, 3]
    return (ycbcr_to_rgb(stacked),)
