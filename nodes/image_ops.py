"""Image utility nodes: ImageScaleBy, ImageInvert, ImageBatch, EmptyImage, ImagePadForOutpaint.

Names, inputs, categories and semantics are ComfyUI's (`nodes.py` at the reference snapshot,
0.3.64), written here. IMAGE is a float tensor [B, H, W, C] in 0..1, MASK [B, H, W].
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from comfy_core.image.resize import upscale_samples
from graph.native import MAX_RESOLUTION, Combo, Float, Input, Int, Output, node
import nodes.checks as checks
from nodes.errors import NodeInputError
from nodes.image import UPSCALE_METHODS

if TYPE_CHECKING:
    import torch

# torch is imported inside the functions that run: registering these nodes and rendering
# /object_info must not import it (server start-up).

# ImagePadForOutpaint fills the new border with mid-grey, not black, as ComfyUI does.
PAD_FILL = 0.5


def outpaint_mask(height: int, width: int, left: int, top: int, right: int, bottom: int,
                  feathering: int) -> torch.Tensor:
    """ImagePadForOutpaint's mask [H + top + bottom, W + left + right]: 1 on the new border, and
    inside the original image (H x W) 0, or near each padded side ((f - d) / f)^2 where d < f is
    the distance to that side (d counts from 0 on the edge row) and f = feathering. Feathering
    applies only when 2 f is under both image sides, as ComfyUI."""
    import torch

    mask = torch.ones((height + top + bottom, width + left + right), dtype=torch.float32)
    inner = torch.zeros((height, width), dtype=torch.float64)
    if 0 < feathering and feathering * 2 < height and feathering * 2 < width:
        rows = torch.arange(height, dtype=torch.float64)[:, None]  # [H, 1]
        cols = torch.arange(width, dtype=torch.float64)[None, :]  # [1, W]
        # An unpadded side is "far away": its distance is the full side length, never < f.
        far_rows, far_cols = torch.full_like(rows, height), torch.full_like(cols, width)
        distance = torch.minimum(
            torch.minimum(rows if top else far_rows, height - rows if bottom else far_rows),
            torch.minimum(cols if left else far_cols, width - cols if right else far_cols))  # [H, W]
        ramp = (feathering - distance) / feathering
        inner = torch.where(distance < feathering, ramp * ramp, inner)
    mask[top:top + height, left:left + width] = inner.to(torch.float32)
    return mask


@node("ImageScaleBy", category="image/upscaling", display_name="Upscale Image By",
      inputs=[Input("image", "IMAGE"), Combo("upscale_method", UPSCALE_METHODS),
              Float("scale_by", default=1.0, min=0.01, max=8.0, step=0.01)],
      outputs=[Output("IMAGE")])
def image_scale_by(image: torch.Tensor, upscale_method: str, scale_by: float) -> tuple[torch.Tensor]:
    """Resize by a factor: each side becomes round(side * scale_by) pixels."""
    checks.image_batch(image, "image")
    checks.choice(upscale_method, UPSCALE_METHODS, "upscale_method")
    samples = image.movedim(-1, 1)  # [B, C, H, W]
    width, height = round(samples.shape[3] * scale_by), round(samples.shape[2] * scale_by)
    if width < 1 or height < 1:
        raise NodeInputError("scale_by", "a factor leaving at least one pixel per side",
                             f"{scale_by} on a {samples.shape[3]}x{samples.shape[2]} image")
    return (upscale_samples(samples, width, height, upscale_method, "disabled").movedim(1, -1),)


@node("ImageInvert", category="image", display_name="Invert Image",
      inputs=[Input("image", "IMAGE")], outputs=[Output("IMAGE")])
def image_invert(image: torch.Tensor) -> tuple[torch.Tensor]:
    """1 - image on every channel (alpha included, as ComfyUI at the snapshot)."""
    checks.image_batch(image, "image")
    return (1.0 - image,)


@node("ImageBatch", category="image", display_name="Batch Images",
      inputs=[Input("image1", "IMAGE"), Input("image2", "IMAGE")], outputs=[Output("IMAGE")])
def image_batch(image1: torch.Tensor, image2: torch.Tensor) -> tuple[torch.Tensor]:
    """image1's images followed by image2's; image2 is first resized to image1's size
    (bilinear, centre crop to image1's aspect ratio) when the sizes differ."""
    import torch

    checks.image_batch(image1, "image1")
    checks.image_batch(image2, "image2")
    if image2.shape[-1] != image1.shape[-1]:
        # ComfyUI (0.3.64) fails here inside torch.cat; name the input instead.
        raise NodeInputError("image2", f"images with {image1.shape[-1]} channels, as image1",
                             f"{image2.shape[-1]} channels")
    if image2.shape[1:] != image1.shape[1:]:
        image2 = upscale_samples(image2.movedim(-1, 1), image1.shape[2], image1.shape[1], "bilinear",
                                 "center").movedim(1, -1)
    return (torch.cat((image1, image2.to(image1)), dim=0),)


@node("EmptyImage", category="image",
      inputs=[Int("width", default=512, min=1, max=MAX_RESOLUTION, step=1),
              Int("height", default=512, min=1, max=MAX_RESOLUTION, step=1),
              Int("batch_size", default=1, min=1, max=4096),
              Int("color", default=0, min=0, max=0xFFFFFF, step=1, display="color")],
      outputs=[Output("IMAGE")])
def empty_image(width: int, height: int, batch_size: int = 1, color: int = 0) -> tuple[torch.Tensor]:
    """A batch of width x height RGB images filled with `color` (0xRRGGBB)."""
    import torch

    for name, value, low, high in (("width", width, 1, MAX_RESOLUTION), ("height", height, 1, MAX_RESOLUTION),
                                   ("batch_size", batch_size, 1, 4096), ("color", color, 0, 0xFFFFFF)):
        checks.integer(value, name, low, high)
    # Each channel divided in Python (float64) then stored as float32, as ComfyUI's torch.full.
    rgb = torch.tensor([((color >> shift) & 0xFF) / 0xFF for shift in (16, 8, 0)], dtype=torch.float32)
    return (rgb.expand(batch_size, height, width, 3).clone(),)


@node("ImagePadForOutpaint", category="image", display_name="Pad Image for Outpainting",
      inputs=[Input("image", "IMAGE"),
              Int("left", default=0, min=0, max=MAX_RESOLUTION, step=8),
              Int("top", default=0, min=0, max=MAX_RESOLUTION, step=8),
              Int("right", default=0, min=0, max=MAX_RESOLUTION, step=8),
              Int("bottom", default=0, min=0, max=MAX_RESOLUTION, step=8),
              Int("feathering", default=40, min=0, max=MAX_RESOLUTION, step=1)],
      outputs=[Output("IMAGE"), Output("MASK")])
def image_pad_for_outpaint(image: torch.Tensor, left: int, top: int, right: int, bottom: int,
                           feathering: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The image with grey (0.5) borders added on each side, and the mask [1, H', W'] of where
    to outpaint (see `outpaint_mask`), for VAEEncodeForInpaint / SetLatentNoiseMask."""
    import torch

    checks.image_batch(image, "image")
    sides: dict[str, Any] = {"left": left, "top": top, "right": right, "bottom": bottom, "feathering": feathering}
    for name, value in sides.items():
        checks.integer(value, name, 0)
    batch, height, width, channels = image.shape
    padded = torch.full((batch, height + top + bottom, width + left + right, channels), PAD_FILL,
                        dtype=torch.float32)
    padded[:, top:top + height, left:left + width, :] = image
    mask = outpaint_mask(height, width, left, top, right, bottom, feathering)
    return (padded, mask.unsqueeze(0))
