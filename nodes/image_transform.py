"""Image transform nodes of ComfyUI's comfy_extras/nodes_images.py (0.3.64): ImageCrop,
ImageRotate, ImageFlip, ImageStitch, ResizeAndPadImage, ImageScaleToMaxDimension.

ComfyUI's names, sockets and semantics, written here; the maths is in comfy_core.image (stitch,
fit) and comfy_core.image.resize. IMAGE is `[B, H, W, C]` in 0..1.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from graph.native import MAX_RESOLUTION, Boolean, Combo, Input, Int, Output, node
import nodes.checks as checks
from nodes.errors import NodeInputError

if TYPE_CHECKING:
    import torch

# torch is imported inside the functions that run: registering these nodes and rendering
# /object_info must not import it (server start-up).

MODULE = "comfy_extras.nodes_images"
ROTATIONS = ["none", "90 degrees", "180 degrees", "270 degrees"]
FLIP_METHODS = ["x-axis: vertically", "y-axis: horizontally"]
STITCH_DIRECTIONS = ["right", "down", "left", "up"]
SPACING_COLORS = ["white", "black", "red", "green", "blue"]
PADDING_COLORS = ["white", "black"]
RESIZE_AND_PAD_METHODS = ["area", "bicubic", "nearest-exact", "bilinear", "lanczos"]
# ComfyUI's list, "bilinear" twice included (the editor shows what ComfyUI shows).
MAX_DIMENSION_METHODS = ["area", "lanczos", "bilinear", "nearest-exact", "bilinear", "bicubic"]
# torch.rot90 from the width axis towards the height axis: quarter turns clockwise.
_QUARTER_TURNS = {"none": 0, "90 degrees": 1, "180 degrees": 2, "270 degrees": 3}


def _resized(image: torch.Tensor, width: int, height: int, method: str, input_name: str) -> torch.Tensor:
    """`image` [B, H, W, C] resized to width x height (no crop); a side under 1 px is refused."""
    from comfy_core.image.resize import upscale_samples

    if width < 1 or height < 1:
        raise NodeInputError(input_name, "a size that leaves at least one pixel per side",
                             f"{width}x{height} from an image of {image.shape[2]}x{image.shape[1]}")
    return upscale_samples(image.movedim(-1, 1), width, height, method, "disabled").movedim(1, -1)


@node("ImageCrop", category="image/transform", display_name="Image Crop", python_module=MODULE,
      inputs=[Input("image", "IMAGE"),
              Int("width", default=512, min=1, max=MAX_RESOLUTION, step=1),
              Int("height", default=512, min=1, max=MAX_RESOLUTION, step=1),
              Int("x", default=0, min=0, max=MAX_RESOLUTION, step=1),
              Int("y", default=0, min=0, max=MAX_RESOLUTION, step=1)],
      outputs=[Output("IMAGE")])
def image_crop(image: torch.Tensor, width: int, height: int, x: int, y: int) -> tuple[torch.Tensor]:
    """The width x height region at (x, y), cut at the image's edges; an origin past an edge is
    moved onto the last column / row, so at least one pixel remains (ComfyUI's rule)."""
    image = checks.image_batch(image, "image")
    for name, value, low in (("width", width, 1), ("height", height, 1), ("x", x, 0), ("y", y, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise NodeInputError(name, f"an int >= {low}", repr(value))
    x, y = min(x, image.shape[2] - 1), min(y, image.shape[1] - 1)
    return (image[:, y:y + height, x:x + width, :],)


@node("ImageRotate", category="image/transform", python_module=MODULE,
      inputs=[Input("image", "IMAGE"), Combo("rotation", ROTATIONS)],
      outputs=[Output("IMAGE")])
def image_rotate(image: torch.Tensor, rotation: str) -> tuple[torch.Tensor]:
    """Rotate clockwise by quarter turns (90 and 270 degrees swap width and height)."""
    import torch

    image = checks.image_batch(image, "image")
    turns = _QUARTER_TURNS[checks.choice(rotation, ROTATIONS, "rotation")]
    return (torch.rot90(image, k=turns, dims=[2, 1]),)


@node("ImageFlip", category="image/transform", python_module=MODULE,
      inputs=[Input("image", "IMAGE"), Combo("flip_method", FLIP_METHODS)],
      outputs=[Output("IMAGE")])
def image_flip(image: torch.Tensor, flip_method: str) -> tuple[torch.Tensor]:
    """Mirror top-bottom ("x-axis: vertically") or left-right ("y-axis: horizontally")."""
    import torch

    image = checks.image_batch(image, "image")
    method = checks.choice(flip_method, FLIP_METHODS, "flip_method")
    return (torch.flip(image, dims=[1] if method.startswith("x") else [2]),)


@node("ImageStitch", category="image/transform", display_name="Image Stitch", python_module=MODULE,
      description="\nStitches image2 to image1 in the specified direction.\n"
                  "If image2 is not provided, returns image1 unchanged.\n"
                  "Optional spacing can be added between images.\n",
      inputs=[Input("image1", "IMAGE"),
              Combo("direction", STITCH_DIRECTIONS, default="right"),
              Boolean("match_image_size", default=True),
              Int("spacing_width", default=0, min=0, max=1024, step=2),
              Combo("spacing_color", SPACING_COLORS, default="white"),
              Input("image2", "IMAGE", optional=True)],
      outputs=[Output("IMAGE")])
def image_stitch(image1: torch.Tensor, direction: str, match_image_size: bool, spacing_width: int,
                 spacing_color: str, image2: torch.Tensor | None = None) -> tuple[torch.Tensor]:
    """image2 beside image1 (right, down, left or up), with an optional spacer between.

    With match_image_size, image2 is first resized (Lanczos) to image1's height (left/right) or
    width (up/down), keeping its aspect ratio; without, the smaller side across the seam is
    centre-padded. Batches are evened out by repeating the last image, channels by adding ones.
    """
    from comfy_core.image.stitch import stitch, stitch_size

    image1 = checks.image_batch(image1, "image1")
    if image2 is None:
        return (image1,)
    image2 = checks.image_batch(image2, "image2")
    direction = checks.choice(direction, STITCH_DIRECTIONS, "direction")
    spacing_color = checks.choice(spacing_color, SPACING_COLORS, "spacing_color")
    if isinstance(spacing_width, bool) or not isinstance(spacing_width, int) or spacing_width < 0:
        raise NodeInputError("spacing_width", "an int >= 0", repr(spacing_width))
    if match_image_size:
        width, height = stitch_size(tuple(image1.shape[1:3]), tuple(image2.shape[1:3]), direction)
        image2 = _resized(image2, width, height, "lanczos", "image2")
    return (stitch(image1, image2, direction, not match_image_size, spacing_width, spacing_color),)


@node("ResizeAndPadImage", category="image/transform", python_module=MODULE,
      inputs=[Input("image", "IMAGE"),
              Int("target_width", default=512, min=1, max=MAX_RESOLUTION, step=1),
              Int("target_height", default=512, min=1, max=MAX_RESOLUTION, step=1),
              Combo("padding_color", PADDING_COLORS),
              Combo("interpolation", RESIZE_AND_PAD_METHODS)],
      outputs=[Output("IMAGE")])
def resize_and_pad_image(image: torch.Tensor, target_width: int, target_height: int, padding_color: str,
                         interpolation: str) -> tuple[torch.Tensor]:
    """The image scaled (aspect kept, sides truncated) to fit target_width x target_height, centred
    on a white (1) or black (0) canvas of exactly that size."""
    from comfy_core.image.fit import fit_inside, pad_centered
    from comfy_core.image.resize import upscale_samples

    image = checks.image_batch(image, "image")
    for name, value in (("target_width", target_width), ("target_height", target_height)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise NodeInputError(name, "an int >= 1", repr(value))
    fill = 0.0 if checks.choice(padding_color, PADDING_COLORS, "padding_color") == "black" else 1.0
    method = checks.choice(interpolation, RESIZE_AND_PAD_METHODS, "interpolation")
    width, height = fit_inside(image.shape[1], image.shape[2], target_width, target_height)
    if width < 1 or height < 1:
        raise NodeInputError("image", f"an aspect ratio that fits {target_width}x{target_height} with at least "
                             "one pixel per side", f"an image of {image.shape[2]}x{image.shape[1]}")
    planes = upscale_samples(image.permute(0, 3, 1, 2), width, height, method, "disabled")  # [B, C, h, w]
    return (pad_centered(planes, target_width, target_height, fill).permute(0, 2, 3, 1),)


@node("ImageScaleToMaxDimension", category="image/upscaling", python_module=MODULE,
      inputs=[Input("image", "IMAGE"), Combo("upscale_method", MAX_DIMENSION_METHODS),
              Int("largest_size", default=512, min=0, max=MAX_RESOLUTION, step=1)],
      outputs=[Output("IMAGE")])
def image_scale_to_max_dimension(image: torch.Tensor, upscale_method: str, largest_size: int) -> tuple[torch.Tensor]:
    """Resize so the longer side is largest_size pixels, the other in proportion (rounded)."""
    from comfy_core.image.fit import max_dimension_size

    image = checks.image_batch(image, "image")
    method = checks.choice(upscale_method, MAX_DIMENSION_METHODS, "upscale_method")
    if isinstance(largest_size, bool) or not isinstance(largest_size, int):
        raise NodeInputError("largest_size", "an int", repr(largest_size))
    width, height = max_dimension_size(image.shape[1], image.shape[2], largest_size)
    return (_resized(image, width, height, method, "largest_size"),)
