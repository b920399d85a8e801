"""Post-processing nodes: ComfyUI's `comfy_extras.nodes_post_processing` (ImageBlend, ImageBlur,
ImageQuantize, ImageSharpen, ImageScaleToTotalPixels).

Names, sockets and semantics are ComfyUI 0.3.64's, written here; the maths is in
comfy_core/image/ (blend.py, filters.py, dither.py). Palette quantisation is Pillow's, as in
ComfyUI, so that the palettes (median cut) and Floyd-Steinberg dithering are the same.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from comfy_core.image.names import BLEND_MODES, DITHER_MODES
from graph.native import Combo, Float, Input, Int, Output, node
import graph.v3_schema as v3
from graph.v3_schema import v3_node
import nodes.checks as checks
from nodes.errors import NodeInputError
from nodes.image import UPSCALE_METHODS
from nodes.mask import composited_images, offset

if TYPE_CHECKING:
    import numpy as np
    import torch

# torch is imported inside the functions that run: registering these nodes and rendering
# /object_info must not import it (server start-up).

MODULE = "comfy_extras.nodes_post_processing"
# ImageScaleToTotalPixels counts a megapixel as 1024 x 1024 pixels, as ComfyUI.
MEGAPIXEL = 1024 * 1024


def _radius(value: object, input_name: str, image: torch.Tensor) -> int:
    """A filter radius the mirror padding can serve: 1 <= r < each side of the image."""
    radius = offset(value, input_name)
    if radius < 1 or radius >= min(image.shape[1], image.shape[2]):
        raise NodeInputError(input_name, f"an int from 1 to {min(image.shape[1], image.shape[2]) - 1} "
                                         f"(below the image's sides)", repr(value))
    return radius


@node("ImageBlend", display_name=None, category="image/postprocessing", python_module=MODULE,
      inputs=[Input("image1", "IMAGE"), Input("image2", "IMAGE"),
              Float("blend_factor", default=0.5, min=0.0, max=1.0, step=0.01),
              Combo("blend_mode", BLEND_MODES)],
      outputs=[Output("IMAGE")])
def image_blend(image1: torch.Tensor, image2: torch.Tensor, blend_factor: float,
                blend_mode: str) -> tuple[torch.Tensor]:
    """image1 mixed with its `blend_mode` blend with image2 by `blend_factor`, clamped to 0..1.
    image2 is first resized to image1 (bicubic, centre crop) when their shapes differ; channels
    are reconciled as in ImageCompositeMasked."""
    from comfy_core.image.blend import blend
    from comfy_core.image.resize import upscale_samples

    base, top = composited_images(checks.image_batch(image1, "image1"), checks.image_batch(image2, "image2"),
                                  ("image1", "image2"))
    blend_mode = checks.choice(blend_mode, BLEND_MODES, "blend_mode")
    top = top.to(base.device)
    if top.shape != base.shape:
        top = upscale_samples(top.movedim(-1, 1), base.shape[2], base.shape[1], "bicubic", "center").movedim(1, -1)
    if top.shape[0] not in (1, base.shape[0]):
        raise NodeInputError("image2", f"an IMAGE batch of 1 or {base.shape[0]} (image1's)",
                             f"a batch of {top.shape[0]}")
    return (blend(base, top, blend_factor, blend_mode),)


@node("ImageBlur", display_name=None, category="image/postprocessing", python_module=MODULE,
      inputs=[Input("image", "IMAGE"), Int("blur_radius", default=1, min=1, max=31, step=1),
              Float("sigma", default=1.0, min=0.1, max=10.0, step=0.1)],
      outputs=[Output("IMAGE")])
def image_blur(image: torch.Tensor, blur_radius: int, sigma: float) -> tuple[torch.Tensor]:
    """Gaussian blur with a (2 blur_radius + 1)^2 kernel; sigma is relative to the radius
    (see comfy_core.image.filters)."""
    from comfy_core.image.filters import blur

    image = checks.image_batch(image, "image")
    if sigma <= 0:
        raise NodeInputError("sigma", "a float > 0", repr(sigma))
    return (blur(image, _radius(blur_radius, "blur_radius", image), sigma),)


@node("ImageSharpen", display_name=None, category="image/postprocessing", python_module=MODULE,
      inputs=[Input("image", "IMAGE"), Int("sharpen_radius", default=1, min=1, max=31, step=1),
              Float("sigma", default=1.0, min=0.1, max=10.0, step=0.01),
              Float("alpha", default=1.0, min=0.0, max=5.0, step=0.01)],
      outputs=[Output("IMAGE")])
def image_sharpen(image: torch.Tensor, sharpen_radius: int, sigma: float, alpha: float) -> tuple[torch.Tensor]:
    """Unsharp masking with strength `alpha`, clamped to 0..1 (see comfy_core.image.filters)."""
    from comfy_core.image.filters import sharpen

    image = checks.image_batch(image, "image")
    if sigma <= 0:
        raise NodeInputError("sigma", "a float > 0", repr(sigma))
    return (sharpen(image, _radius(sharpen_radius, "sharpen_radius", image), sigma, alpha),)


def quantize_rgb(pixels: np.ndarray, colors: int, dither: str) -> np.ndarray:
    """One [H, W, 3] uint8 array reduced to a palette of at most `colors` colours (Pillow's
    median cut on the image), mapped with `dither`: none, Floyd-Steinberg error diffusion,
    or Bayer ordered dithering of order 2, 4, 8 or 16. Returns the [H, W, 3] uint8 array."""
    import numpy as np
    import torch
    from PIL import Image

    from comfy_core.image.dither import bayer_offsets

    image = Image.fromarray(pixels)
    # The palette is computed separately and then applied, because a quantize with dithering
    # and a colour count would pick its palette after dithering (Pillow issue 5836).
    palette = image.quantize(colors=colors)
    if dither == "none":
        mapped = image.quantize(palette=palette, dither=Image.Dither.NONE)
    elif dither == "floyd-steinberg":
        mapped = image.quantize(palette=palette, dither=Image.Dither.FLOYDSTEINBERG)
    else:
        order = int(dither.split("-")[-1])
        palette_size = len(palette.getpalette()) // 3
        shifted = bayer_offsets(torch.from_numpy(np.asarray(pixels)), order, palette_size)
        mapped = Image.fromarray(shifted.numpy()).quantize(palette=palette, dither=Image.Dither.NONE)
    return np.asarray(mapped.convert("RGB"))


@node("ImageQuantize", display_name=None, category="image/postprocessing", python_module=MODULE,
      inputs=[Input("image", "IMAGE"), Int("colors", default=256, min=1, max=256, step=1),
              Combo("dither", DITHER_MODES)],
      outputs=[Output("IMAGE")])
def image_quantize(image: torch.Tensor, colors: int, dither: str) -> tuple[torch.Tensor]:
    """Each RGB image reduced to its own palette of at most `colors` colours (8-bit pixels,
    truncated from 255 x value), dithered as chosen."""
    import torch

    from comfy_core.image.pixels import image_to_uint8

    image = checks.image_batch(image, "image")
    if image.shape[-1] != 3:
        raise NodeInputError("image", "an RGB IMAGE (3 channels)", f"{image.shape[-1]} channel(s)")
    if not 1 <= offset(colors, "colors") <= 256:
        raise NodeInputError("colors", "an int from 1 to 256", repr(colors))
    dither = checks.choice(dither, DITHER_MODES, "dither")
    out = [torch.from_numpy(quantize_rgb(image_to_uint8(item), colors, dither).copy()).float() / 255
           for item in image]
    return (torch.stack(out).to(image),)


@v3_node("ImageScaleToTotalPixels", display_name="Scale Image to Total Pixels", category="image/upscaling",
         python_module=MODULE,
         inputs=[v3.Socket("image", "IMAGE"), v3.Combo("upscale_method", UPSCALE_METHODS),
                 v3.Float("megapixels", default=1.0, min=0.01, max=16.0, step=0.01),
                 v3.Int("resolution_steps", default=1, min=1, max=256, advanced=True)],
         outputs=[v3.Output("IMAGE")])
def image_scale_to_total_pixels(image: torch.Tensor, upscale_method: str, megapixels: float,
                                resolution_steps: int = 1) -> tuple[torch.Tensor]:
    """Resized, keeping the aspect ratio, to about `megapixels` x 1024^2 pixels: each side is
    multiplied by sqrt(int(megapixels * 1024^2) / (W * H)) and rounded to the nearest multiple of
    `resolution_steps` (behaviour of today's ComfyUI's comfy_extras/nodes_post_processing.py:
    round(side * scale / steps) * steps; 1 is plain rounding), declared with today's V3 schema."""
    from comfy_core.image.resize import upscale_samples

    image = checks.image_batch(image, "image")
    upscale_method = checks.choice(upscale_method, UPSCALE_METHODS, "upscale_method")
    if not megapixels > 0:
        raise NodeInputError("megapixels", "a float > 0", repr(megapixels))
    height, width = image.shape[1], image.shape[2]
    steps = offset(resolution_steps, "resolution_steps")
    if not 1 <= steps <= 256:
        raise NodeInputError("resolution_steps", "an int from 1 to 256", repr(resolution_steps))
    scale = math.sqrt(int(megapixels * MEGAPIXEL) / (width * height))
    new_width, new_height = round(width * scale / steps) * steps, round(height * scale / steps) * steps
    if new_width < 1 or new_height < 1:
        raise NodeInputError("megapixels", "a size leaving at least one pixel per side",
                             f"{megapixels} on a {width}x{height} image")
    return (upscale_samples(image.movedim(-1, 1), new_width, new_height, upscale_method, "disabled").movedim(1, -1),)
