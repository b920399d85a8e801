"""Mask nodes: ComfyUI's `comfy_extras.nodes_mask` (LatentCompositeMasked, ImageCompositeMasked,
MaskToImage, ImageToMask, ImageColorToMask, SolidMask, InvertMask, CropMask, MaskComposite,
FeatherMask, GrowMask, ThresholdMask, MaskPreview).

Names, sockets and semantics are ComfyUI 0.3.64's, written here; the maths is in
comfy_core/mask/ops.py and comfy_core/image/composite.py. A MASK is [B, H, W] (a single [H, W]
mask is read as a batch of one), 1 = selected; IMAGE [B, H, W, C] in 0..1.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from comfy_core.mask.names import COMBINE_OPERATIONS
from graph.native import MAX_RESOLUTION, Boolean, Combo, Float, Hidden, Input, Int, Output, node
import nodes.checks as checks
from nodes.environment import current_env
from nodes.errors import NodeInputError, describe, image_input_errors

if TYPE_CHECKING:
    import torch

# torch is imported inside the functions that run: registering these nodes and rendering
# /object_info must not import it (server start-up).

MODULE = "comfy_extras.nodes_mask"
IMAGE_CHANNELS = ["red", "green", "blue", "alpha"]
# MaskPreview saves as ComfyUI's SaveImage does (level 4), into the temp folder like a preview.
MASK_PREVIEW_COMPRESS_LEVEL = 4
MASK_PREVIEW_DESCRIPTION = "Saves the input images to your ComfyUI output directory."  # inherited from SaveImage


def offset(value: Any, input_name: str) -> int:
    """A pixel offset or size: an int (bools refused)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise NodeInputError(input_name, "an int", repr(value))
    return value


def composited_images(destination: torch.Tensor, source: torch.Tensor,
                      names: tuple[str, str] = ("destination", "source")) -> tuple[torch.Tensor, torch.Tensor]:
    """Two IMAGE inputs reconciled as ComfyUI does before compositing or blending
    (`match_alpha`: extra source channels dropped, an RGB destination under an RGBA source given
    an opaque alpha). A source with fewer channels than the destination is refused (ComfyUI
    fails on it inside the arithmetic), except a grey source on RGB, which broadcasts there."""
    from comfy_core.image.composite import match_alpha

    have, need = source.shape[-1], destination.shape[-1]
    if have < need and not (have == 1 and need == 3):
        raise NodeInputError(names[1], f"an IMAGE with at least {need} channels, as {names[0]}", f"{have} channels")
    return match_alpha(destination, source)


@node("LatentCompositeMasked", category="latent", python_module=MODULE,
      inputs=[Input("destination", "LATENT"), Input("source", "LATENT"),
              Int("x", default=0, min=0, max=MAX_RESOLUTION, step=8),
              Int("y", default=0, min=0, max=MAX_RESOLUTION, step=8),
              Boolean("resize_source", default=False),
              Input("mask", "MASK", optional=True)],
      outputs=[Output("LATENT")])
def latent_composite_masked(destination: dict, source: dict, x: int, y: int, resize_source: bool,
                            mask: torch.Tensor | None = None) -> tuple[dict]:
    """`source`'s samples pasted into `destination`'s at pixel (x, y) (divided by 8, floored),
    through `mask` when given; the destination's other keys (noise_mask, batch_index) are kept."""
    from comfy_core.image.composite import paste

    to = checks.latent(destination, "destination")
    src = checks.latent(source, "source")
    if to.ndim != 4 or src.ndim != 4:
        raise NodeInputError("source" if to.ndim == 4 else "destination", "LATENT samples [B, C, h, w]",
                             describe(src if to.ndim == 4 else to))
    if src.shape[1] != to.shape[1]:
        raise NodeInputError("source", f"a LATENT with {to.shape[1]} channels, as the destination",
                             f"{src.shape[1]} channels")
    if mask is not None:
        mask = checks.mask_batch(mask, "mask")
    out = dict(destination)
    out["samples"] = paste(to, src, offset(x, "x"), offset(y, "y"), mask, 8, bool(resize_source))
    return (out,)


@node("ImageCompositeMasked", category="image", python_module=MODULE,
      inputs=[Input("destination", "IMAGE"), Input("source", "IMAGE"),
              Int("x", default=0, min=0, max=MAX_RESOLUTION, step=1),
              Int("y", default=0, min=0, max=MAX_RESOLUTION, step=1),
              Boolean("resize_source", default=False),
              Input("mask", "MASK", optional=True)],
      outputs=[Output("IMAGE")])
def image_composite_masked(destination: torch.Tensor, source: torch.Tensor, x: int, y: int, resize_source: bool,
                           mask: torch.Tensor | None = None) -> tuple[torch.Tensor]:
    """`source` pasted onto `destination` with its top-left corner at (x, y), through `mask`
    (resized to the source) when given. An RGBA source onto RGB loses its alpha; an RGB
    destination under an RGBA source gains an opaque alpha, as ComfyUI."""
    from comfy_core.image.composite import paste

    to, src = composited_images(checks.image_batch(destination, "destination"), checks.image_batch(source, "source"))
    if mask is not None:
        mask = checks.mask_batch(mask, "mask")
    out = paste(to.movedim(-1, 1), src.movedim(-1, 1), offset(x, "x"), offset(y, "y"), mask, 1, bool(resize_source))
    return (out.movedim(1, -1),)


@node("MaskToImage", category="mask", display_name="Convert Mask to Image", python_module=MODULE,
      inputs=[Input("mask", "MASK")], outputs=[Output("IMAGE")])
def mask_to_image(mask: torch.Tensor) -> tuple[torch.Tensor]:
    """The mask as a grey RGB image [B, H, W, 3] (a broadcast view of the mask, as ComfyUI)."""
    mask = checks.mask_batch(mask)
    return (mask.unsqueeze(-1).expand(-1, -1, -1, 3),)


@node("ImageToMask", category="mask", display_name="Convert Image to Mask", python_module=MODULE,
      inputs=[Input("image", "IMAGE"), Combo("channel", IMAGE_CHANNELS)], outputs=[Output("MASK")])
def image_to_mask(image: torch.Tensor, channel: str) -> tuple[torch.Tensor]:
    """One channel of the image as a mask [B, H, W]."""
    image = checks.image_batch(image, "image")
    index = IMAGE_CHANNELS.index(checks.choice(channel, IMAGE_CHANNELS, "channel"))
    if index >= image.shape[-1]:
        raise NodeInputError("image", f"an IMAGE with a {channel} channel", f"{image.shape[-1]} channels")
    return (image[..., index],)


@node("ImageColorToMask", category="mask", python_module=MODULE,
      inputs=[Input("image", "IMAGE"), Int("color", default=0, min=0, max=0xFFFFFF, step=1, display="color")],
      outputs=[Output("MASK")])
def image_color_to_mask(image: torch.Tensor, color: int) -> tuple[torch.Tensor]:
    """1 where the pixel's 8-bit RGB colour is exactly `color` (0xRRGGBB), else 0."""
    from comfy_core.mask.ops import color_to_mask

    image = checks.image_batch(image, "image")
    if image.shape[-1] < 3:
        raise NodeInputError("image", "an RGB or RGBA IMAGE", f"{image.shape[-1]} channel(s)")
    return (color_to_mask(image, offset(color, "color")),)


@node("SolidMask", category="mask", python_module=MODULE,
      inputs=[Float("value", default=1.0, min=0.0, max=1.0, step=0.01),
              Int("width", default=512, min=1, max=MAX_RESOLUTION, step=1),
              Int("height", default=512, min=1, max=MAX_RESOLUTION, step=1)],
      outputs=[Output("MASK")])
def solid_mask(value: float, width: int, height: int) -> tuple[torch.Tensor]:
    """A [1, height, width] mask filled with `value`."""
    import torch

    for name, size in (("width", width), ("height", height)):
        if offset(size, name) < 1:
            raise NodeInputError(name, "an int >= 1", repr(size))
    return (torch.full((1, height, width), value, dtype=torch.float32),)


@node("InvertMask", category="mask", python_module=MODULE,
      inputs=[Input("mask", "MASK")], outputs=[Output("MASK")])
def invert_mask(mask: torch.Tensor) -> tuple[torch.Tensor]:
    """1 - mask."""
    return (1.0 - checks.mask_batch(mask),)


@node("CropMask", category="mask", python_module=MODULE,
      inputs=[Input("mask", "MASK"),
              Int("x", default=0, min=0, max=MAX_RESOLUTION, step=1),
              Int("y", default=0, min=0, max=MAX_RESOLUTION, step=1),
              Int("width", default=512, min=1, max=MAX_RESOLUTION, step=1),
              Int("height", default=512, min=1, max=MAX_RESOLUTION, step=1)],
      outputs=[Output("MASK")])
def crop_mask(mask: torch.Tensor, x: int, y: int, width: int, height: int) -> tuple[torch.Tensor]:
    """The width x height region at (x, y), cut to what lies inside the mask (as Python
    slicing: a region starting past the mask's edge is empty)."""
    mask = checks.mask_batch(mask)
    for name, value in (("x", x), ("y", y), ("width", width), ("height", height)):
        if offset(value, name) < 0:
            raise NodeInputError(name, "an int >= 0", repr(value))
    return (mask[:, y:y + height, x:x + width],)


@node("MaskComposite", category="mask", python_module=MODULE,
      inputs=[Input("destination", "MASK"), Input("source", "MASK"),
              Int("x", default=0, min=0, max=MAX_RESOLUTION, step=1),
              Int("y", default=0, min=0, max=MAX_RESOLUTION, step=1),
              Combo("operation", COMBINE_OPERATIONS)],
      outputs=[Output("MASK")])
def mask_composite(destination: torch.Tensor, source: torch.Tensor, x: int, y: int,
                   operation: str) -> tuple[torch.Tensor]:
    """`destination` with `source` combined into the region at (x, y) by `operation`
    (multiply, add, subtract; and, or, xor on the rounded masks), clamped to 0..1."""
    from comfy_core.mask.ops import combine

    to = checks.mask_batch(destination, "destination")
    src = checks.mask_batch(source, "source")
    if src.shape[0] not in (1, to.shape[0]):
        raise NodeInputError("source", f"a MASK batch of 1 or {to.shape[0]} (the destination's)",
                             f"a batch of {src.shape[0]}")
    operation = checks.choice(operation, COMBINE_OPERATIONS, "operation")
    return (combine(to, src, offset(x, "x"), offset(y, "y"), operation),)


@node("FeatherMask", category="mask", python_module=MODULE,
      inputs=[Input("mask", "MASK"),
              Int("left", default=0, min=0, max=MAX_RESOLUTION, step=1),
              Int("top", default=0, min=0, max=MAX_RESOLUTION, step=1),
              Int("right", default=0, min=0, max=MAX_RESOLUTION, step=1),
              Int("bottom", default=0, min=0, max=MAX_RESOLUTION, step=1)],
      outputs=[Output("MASK")])
def feather_mask(mask: torch.Tensor, left: int, top: int, right: int, bottom: int) -> tuple[torch.Tensor]:
    """The mask faded linearly to its edges over left/top/right/bottom pixels
    (see `comfy_core.mask.ops.feather` for ComfyUI's off-by-one on the right and bottom)."""
    from comfy_core.mask.ops import feather

    mask = checks.mask_batch(mask)
    sides = {"left": left, "top": top, "right": right, "bottom": bottom}
    for name, value in sides.items():
        if offset(value, name) < 0:
            raise NodeInputError(name, "an int >= 0", repr(value))
    return (feather(mask, left, top, right, bottom),)


@node("GrowMask", category="mask", python_module=MODULE,
      inputs=[Input("mask", "MASK"),
              Int("expand", default=0, min=-MAX_RESOLUTION, max=MAX_RESOLUTION, step=1),
              Boolean("tapered_corners", default=True)],
      outputs=[Output("MASK")])
def grow_mask(mask: torch.Tensor, expand: int, tapered_corners: bool) -> tuple[torch.Tensor]:
    """The mask grown by `expand` pixels (shrunk when negative), by grey dilation/erosion."""
    from comfy_core.mask.ops import grow

    return (grow(checks.mask_batch(mask), offset(expand, "expand"), bool(tapered_corners)),)


@node("ThresholdMask", category="mask", python_module=MODULE,
      inputs=[Input("mask", "MASK"), Float("value", default=0.5, min=0.0, max=1.0, step=0.01)],
      outputs=[Output("MASK")])
def threshold_mask(mask: torch.Tensor, value: float) -> tuple[torch.Tensor]:
    """1 where mask > value, else 0."""
    return ((checks.mask_batch(mask) > value).float(),)


@node("MaskPreview", category="mask", python_module=MODULE, output_node=True,
      description=MASK_PREVIEW_DESCRIPTION,
      inputs=[Input("mask", "MASK"), Hidden("prompt", "PROMPT"), Hidden("extra_pnginfo", "EXTRA_PNGINFO")],
      outputs=[Output("MASK", "mask")])
def mask_preview(mask: torch.Tensor, filename_prefix: str = "ComfyUI", prompt: Any = None,
                 extra_pnginfo: Any = None) -> dict:
    """Shows the mask in the editor as a grey image, written to the temp folder, and passes the mask
    on (today's ComfyUI returns `NodeOutput(mask, ui=PreviewMask(mask))`; its templates link the
    output `{"name": "mask", "type": "MASK"}`, e.g. image_anima_lllite_image_inpainting).

    `filename_prefix` is today's execute parameter (comfy_extras/nodes_mask.py@d9ac00e2, not a
    declared input): accepted and, as there, unused, the preview keeping its temp-file name."""
    from comfy_core.image.png import preview_target, write_image_batch
    from nodes.image import metadata_enabled

    (image,) = mask_to_image(mask)
    env = current_env()
    target = dataclasses.replace(preview_target(env.temp_dir), compress_level=MASK_PREVIEW_COMPRESS_LEVEL)
    with image_input_errors():
        out = write_image_batch(image, "ComfyUI", target, prompt=prompt, extra_pnginfo=extra_pnginfo,
                                metadata=metadata_enabled(env))
    return {**out, "result": (mask,)}
