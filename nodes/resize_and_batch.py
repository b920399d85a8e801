"""ResizeImageMaskNode and BatchImagesNode of ComfyUI's comfy_extras/nodes_post_processing.py
(2026), declared as ComfyUI's V3 schema renders them (graph/v3_schema.py).

ResizeImageMaskNode takes an IMAGE `[B,H,W,C]` or a MASK `[B,H,W]` (a MatchType socket: the
output has the input's type) and a dynamic combo `resize_type` whose choice brings its own
widgets. The sizes are computed as ComfyUI computes them (Python's round(), the same rules for
0 = "keep the aspect ratio", the cover-then-centre-crop of "scale to multiple"), and resampling is
comfy_core's `upscale_samples` (ComfyUI's common_upscale).
BatchImagesNode concatenates its growing `images` inputs, padding an RGB image to RGBA (alpha 1)
when another has 4 channels and resizing each to the first one's size (bilinear, centre crop).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from comfy_core.image.resize import upscale_samples
from graph.native import MAX_RESOLUTION
from graph.v3_schema import (Autogrow, Combo, ComboOption, DynamicCombo, Float, Int, MatchType, MatchTypeOutput,
                             Output, Socket, v3_node)
from nodes.errors import NodeInputError, describe

if TYPE_CHECKING:
    import torch

MODULE = "comfy_extras.nodes_post_processing"
SCALE_METHODS = ["nearest-exact", "bilinear", "area", "bicubic", "lanczos"]
CROP_METHODS = ["disabled", "center"]

SCALE_BY = "scale by multiplier"
SCALE_DIMENSIONS = "scale dimensions"
SCALE_LONGER = "scale longer dimension"
SCALE_SHORTER = "scale shorter dimension"
SCALE_WIDTH = "scale width"
SCALE_HEIGHT = "scale height"
SCALE_TOTAL_PIXELS = "scale total pixels"
MATCH_SIZE = "match size"
SCALE_TO_MULTIPLE = "scale to multiple"


def _size(name: str, tooltip: str, *, default: int = 512, min: int = 0) -> Any:  # noqa: A002
    return Int(name, default=default, min=min, max=MAX_RESOLUTION, step=1, tooltip=tooltip)


_CROP = Combo("crop", CROP_METHODS, default="center",
              tooltip="How to handle aspect ratio mismatch: 'disabled' stretches to fit, 'center' crops to maintain "
                      "aspect ratio.")

RESIZE_TYPE = DynamicCombo("resize_type", tooltip="Select how to resize: by exact dimensions, scale factor, matching "
                                                  "another image, etc.", options=(
    ComboOption(SCALE_DIMENSIONS, (
        _size("width", "Target width in pixels. Set to 0 to auto-calculate from height while preserving aspect ratio."),
        _size("height", "Target height in pixels. Set to 0 to auto-calculate from width while preserving aspect "
                        "ratio."),
        _CROP)),
    ComboOption(SCALE_BY, (
        Float("multiplier", default=1.00, min=0.01, max=8.0, step=0.01,
              tooltip="Scale factor (e.g., 2.0 doubles size, 0.5 halves size)."),)),
    ComboOption(SCALE_LONGER, (
        _size("longer_size", "The longer edge will be resized to this value. Aspect ratio is preserved."),)),
    ComboOption(SCALE_SHORTER, (
        _size("shorter_size", "The shorter edge will be resized to this value. Aspect ratio is preserved."),)),
    ComboOption(SCALE_WIDTH, (
        _size("width", "Target width in pixels. Height auto-adjusts to preserve aspect ratio."),)),
    ComboOption(SCALE_HEIGHT, (
        _size("height", "Target height in pixels. Width auto-adjusts to preserve aspect ratio."),)),
    ComboOption(SCALE_TOTAL_PIXELS, (
        Float("megapixels", default=1.0, min=0.01, max=16.0, step=0.01,
              tooltip="Target total megapixels (e.g., 1.0 \u2248 1024\u00d71024). Aspect ratio is preserved."),
        _size("multiple", "Round width and height to the nearest multiple of this number.", default=1, min=1))),
    ComboOption(MATCH_SIZE, (
        Socket("match", "IMAGE,MASK", tooltip="Resize input to match the dimensions of this reference image or mask."),
        _CROP)),
    ComboOption(SCALE_TO_MULTIPLE, (
        _size("multiple", "Resize so width and height are divisible by this number. Useful for latent alignment "
                          "(e.g., 8 or 64).", default=8, min=1),)),
))


def _planes(value: Any, input_name: str) -> tuple["torch.Tensor", bool]:
    """`[B,C,H,W]` planes of an IMAGE `[B,H,W,C]` or MASK `[B,H,W]`, and whether it was an image."""
    import torch

    if not isinstance(value, torch.Tensor) or value.ndim not in (3, 4):
        raise NodeInputError(input_name, "an IMAGE [B,H,W,C] or a MASK [B,H,W]", describe(value))
    is_image = value.ndim == 4
    return (value.movedim(-1, 1) if is_image else value.unsqueeze(1)), is_image


def _back(planes: "torch.Tensor", is_image: bool) -> "torch.Tensor":
    return planes.movedim(1, -1) if is_image else planes.squeeze(1)


def _resample(value: "torch.Tensor", width: int, height: int, method: str, crop: str = "disabled") -> "torch.Tensor":
    planes, is_image = _planes(value, "input")
    return _back(upscale_samples(planes, int(width), int(height), method, crop), is_image)


def target_size(width: int, height: int, resize_type: dict[str, Any]) -> tuple[int, int] | None:
    """The output size for an input of `width` x `height`, or None to return the input as it is
    (dimensions 0 and 0). "scale to multiple" is handled by `scale_to_multiple`."""
    kind = resize_type["resize_type"]
    if kind == SCALE_BY:
        return round(width * resize_type["multiplier"]), round(height * resize_type["multiplier"])
    if kind in (SCALE_DIMENSIONS, SCALE_WIDTH, SCALE_HEIGHT):
        w = resize_type["width"] if kind != SCALE_HEIGHT else 0
        h = resize_type["height"] if kind != SCALE_WIDTH else 0
        if w == 0 and h == 0:
            return None
        if w == 0:
            w = max(1, round(width * h / height))
        elif h == 0:
            h = max(1, round(height * w / width))
        return w, h
    if kind in (SCALE_LONGER, SCALE_SHORTER):
        size = resize_type["longer_size" if kind == SCALE_LONGER else "shorter_size"]
        if width == height:
            return size, size
        by_width = (width > height) == (kind == SCALE_LONGER)  # the edge that becomes `size`
        return (size, round(height / width * size)) if by_width else (round(width / height * size), size)
    if kind == SCALE_TOTAL_PIXELS:
        multiple = resize_type["multiple"]
        scale = math.sqrt(int(resize_type["megapixels"] * 1024 * 1024) / (width * height))
        return (max(1, round(width * scale / multiple)) * multiple, max(1, round(height * scale / multiple)) * multiple)
    raise NodeInputError("resize_type", f"one of {RESIZE_TYPE.keys()}", repr(kind))


def scale_to_multiple(value: "torch.Tensor", multiple: int, method: str) -> "torch.Tensor":
    """Scale to cover the largest size divisible by `multiple`, then crop that size, centred."""
    height, width = value.shape[1], value.shape[2]
    target_w, target_h = width // multiple * multiple, height // multiple * multiple
    if multiple <= 1 or target_w == 0 or target_h == 0 or (target_w, target_h) == (width, height):
        return value
    s_w, s_h = target_w / width, target_h / height
    if s_w >= s_h:
        scaled_w, scaled_h = target_w, max(target_h, math.ceil(height * s_w))
    else:
        scaled_w, scaled_h = max(target_w, math.ceil(width * s_h)), target_h
    scaled = _resample(value, scaled_w, scaled_h, method)
    x0, y0 = (scaled_w - target_w) // 2, (scaled_h - target_h) // 2
    return scaled[:, y0:y0 + target_h, x0:x0 + target_w]


@v3_node("ResizeImageMaskNode", display_name="Resize Image/Mask", category="image/transform", python_module=MODULE,
         description="Resize an image or mask using various scaling methods.",
         search_aliases=["resize", "resize image", "resize mask", "scale", "scale image", "scale mask",
                         "image resize", "change size", "dimensions", "shrink", "enlarge"],
         inputs=[MatchType("input", "input_type", ("IMAGE", "MASK")), RESIZE_TYPE,
                 Combo("scale_method", SCALE_METHODS, default="area",
                       tooltip="Interpolation algorithm. 'area' is best for downscaling, 'lanczos' for upscaling, "
                               "'nearest-exact' for pixel art.")],
         outputs=[MatchTypeOutput("input_type", "resized")])
def resize_image_mask(input: Any, resize_type: dict[str, Any], scale_method: str) -> tuple[Any]:  # noqa: A002
    """The image or mask resized as `resize_type` says (an image stays an image, a mask a mask)."""
    if scale_method not in SCALE_METHODS:
        raise NodeInputError("scale_method", f"one of {SCALE_METHODS}", repr(scale_method))
    _planes(input, "input")
    kind = resize_type["resize_type"]
    if kind == SCALE_TO_MULTIPLE:
        return (scale_to_multiple(input, resize_type["multiple"], scale_method),)
    if kind == MATCH_SIZE:
        match, _ = _planes(resize_type["match"], "resize_type.match")
        return (_resample(input, match.shape[-1], match.shape[-2], scale_method, resize_type["crop"]),)
    size = target_size(input.shape[2], input.shape[1], resize_type)
    if size is None:
        return (input,)
    crop = resize_type["crop"] if kind == SCALE_DIMENSIONS else "disabled"
    return (_resample(input, size[0], size[1], scale_method, crop),)


def batch_images(images: list["torch.Tensor"]) -> "torch.Tensor":
    """One batch: RGB padded with alpha 1 when any image has 4 channels, each resized to the
    first image's size (bilinear, centre crop), concatenated in order."""
    import torch

    channels = max(image.shape[-1] for image in images)
    padded = [torch.nn.functional.pad(image, (0, 1), value=1.0) if image.shape[-1] < channels else image
              for image in images]
    height, width = padded[0].shape[1], padded[0].shape[2]
    same = [image if image.shape[1:] == padded[0].shape[1:]
            else upscale_samples(image.movedim(-1, 1), width, height, "bilinear", "center").movedim(1, -1)
            for image in padded]
    return torch.cat(same, dim=0)


@v3_node("BatchImagesNode", display_name="Batch Images", category="image/batch", python_module=MODULE,
         essentials_category="Image Tools",
         search_aliases=["batch", "image batch", "batch images", "combine images", "merge images", "stack images"],
         inputs=[Autogrow("images", Socket("image", "IMAGE"), prefix="image", min=1, max=50)],
         outputs=[Output("IMAGE")])
def batch_images_node(images: dict[str, Any]) -> tuple[Any]:
    """The linked images as one batch, in socket order."""
    import torch

    for name, image in images.items():
        if not isinstance(image, torch.Tensor) or image.ndim != 4:
            raise NodeInputError(f"images.{name}", "an IMAGE [B,H,W,C]", describe(image))
    return (batch_images(list(images.values())) if images else None,)
