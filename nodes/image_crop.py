"""ImageCropV2 and ImageCropToMask of ComfyUI's comfy_extras/nodes_images.py (2026), declared as
ComfyUI's V3 schema renders them (graph/v3_schema.py); behaviour read from that file, written here.

ImageCropV2 ("Crop Image") takes its region from the editor's bounding-box widget
(`{"x", "y", "width", "height"}`), clamps the corner inside the image as the old ImageCrop does
and shows the crop as a preview (V3's `has_intermediate_output`).

ImageCropToMask ("Crop Image to Mask") frames each image's subject for 3-D pipelines: the mask's
bounding box (pixels above 0.8 after a light threshold) grown to the output's aspect ratio and by
`pad_factor`, cut with zero padding where it leaves the image, composited over `background` with
the mask, and resized (Lanczos) to `width` x `height`.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from comfy_core.image.png import preview_target, save_images
from comfy_core.image.resize import upscale_samples
from graph.v3_schema import Float, Int, Output, Socket, Widget, v3_node
from nodes.environment import current_env
from nodes.errors import NodeInputError, describe

if TYPE_CHECKING:
    import torch

MODULE = "comfy_extras.nodes_images"
DEFAULT_REGION = {"x": 0, "y": 0, "width": 512, "height": 512}
FOREGROUND_LEVEL = 204  # a mask pixel (as uint8) above this belongs to the subject's box
MASK_THRESHOLD = 0.05  # mask values below this count as background


def _image(value: Any, name: str) -> "torch.Tensor":
    import torch

    if not isinstance(value, torch.Tensor) or value.ndim != 4:
        raise NodeInputError(name, "an IMAGE [B,H,W,C]", describe(value))
    return value


def crop_to_region(image: "torch.Tensor", region: Any) -> "torch.Tensor":
    """`image[:, y:y+height, x:x+width]`, the corner clamped to the last row and column."""
    if not isinstance(region, dict):
        raise NodeInputError("crop_region", "a bounding box {x, y, width, height}", describe(region))
    try:
        x, y, width, height = (int(region.get(k, DEFAULT_REGION[k])) for k in ("x", "y", "width", "height"))
    except (TypeError, ValueError):
        raise NodeInputError("crop_region", "integer x, y, width and height", repr(region)) from None
    x = min(x, image.shape[2] - 1)
    y = min(y, image.shape[1] - 1)
    return image[:, y:y + height, x:x + width, :]


@v3_node("ImageCropV2", display_name="Crop Image", category="image/transform", python_module=MODULE,
         description="Crop an image to the specified dimensions.", essentials_category="Image Tools",
         has_intermediate_output=True, search_aliases=["crop", "cut", "trim"],
         inputs=[Socket("image", "IMAGE"),
                 Widget("crop_region", "BOUNDING_BOX", default=dict(DEFAULT_REGION), component="ImageCrop")],
         outputs=[Output("IMAGE")])
def image_crop_v2(image: Any, crop_region: Any = None) -> dict:
    """The cropped batch, and its preview in the temp folder."""
    cropped = crop_to_region(_image(image, "image"), crop_region if crop_region is not None else DEFAULT_REGION)
    target = preview_target(current_env().temp_dir)
    previews = save_images(cropped, Path(target.output_dir), "ComfyUI" + target.prefix_append, folder_type=target.type,
                           compress_level=target.compress_level, metadata=False)
    return {"result": (cropped,), "ui": {"images": previews}}



def _hex_rgb(color: Any) -> tuple[float, float, float]:
    """`#rrggbb` as three floats in 0..1; anything else is black (ComfyUI's fallback)."""
    digits = str(color).lstrip("#")
    if len(digits) != 6:
        return (0.0, 0.0, 0.0)
    try:
        return tuple(int(digits[i:i + 2], 16) / 255.0 for i in (0, 2, 4))  # type: ignore[return-value]
    except ValueError:
        return (0.0, 0.0, 0.0)


def _grow(mask: "torch.Tensor", pixels: int) -> "torch.Tensor":
    """Dilate (pixels > 0) or erode (< 0) a `[1,1,H,W]` mask with a square window."""
    import torch

    if pixels == 0:
        return mask
    radius = abs(pixels)
    window = dict(kernel_size=2 * radius + 1, stride=1, padding=radius)
    if pixels > 0:
        return torch.nn.functional.max_pool2d(mask, **window)
    return 1.0 - torch.nn.functional.max_pool2d(1.0 - mask, **window)


def frame_subject(image: "torch.Tensor", mask: "torch.Tensor", *, max_size: int, pad_factor: float,
                  grow: int, background: tuple[float, float, float], aspect: float) -> "torch.Tensor":
    """One image `[H,W,C]` and its mask `[H,W]` -> the subject framed, `[1,3,h,w]` (before the
    final resize). A mask whose border is mostly set and centre mostly clear is taken as
    inverted; one with no subject pixels is tried inverted, and failing that the whole image is
    kept."""
    import torch

    img = image.permute(2, 0, 1).unsqueeze(0).cpu().float().clamp(0, 1)  # [1,C,H,W]
    m = mask.unsqueeze(0).unsqueeze(0).cpu().float().clamp(0, 1)  # [1,1,H,W]
    h, w = m.shape[-2:]
    plane = m[0, 0]
    border = torch.cat([plane[0, :], plane[-1, :], plane[:, 0], plane[:, -1]])
    centre = plane[h // 4:h - h // 4, w // 4:w - w // 4]
    if float(border.mean()) > 0.5 and float(centre.mean()) < 0.5:
        m = 1.0 - m
    m = _grow(m, grow)
    m = torch.where(m < MASK_THRESHOLD, torch.zeros_like(m), m)

    height, width = img.shape[-2:]
    if max(height, width) > max_size:  # work at most at the output's size
        scale = max_size / max(height, width)
        width, height = int(width * scale), int(height * scale)
        img = upscale_samples(img, width, height, "lanczos", "disabled")
        m = upscale_samples(m, width, height, "lanczos", "disabled")

    level = (m[0, 0].clamp(0, 1) * 255.0).to(torch.uint8)
    subject = (level > FOREGROUND_LEVEL).nonzero()
    if subject.numel() == 0:
        inverse = ((255 - level) > FOREGROUND_LEVEL).nonzero()
        if inverse.numel() > 0:
            m, subject = 1.0 - m, inverse
    if subject.numel() > 0:
        y0, x0 = subject.min(dim=0).values.tolist()
        y1, x1 = subject.max(dim=0).values.tolist()
        cy, cx = (y0 + y1) / 2.0, (x0 + x1) / 2.0
        box_w, box_h = x1 - x0 + 1, y1 - y0 + 1
        if box_w / max(box_h, 1) >= aspect:  # the box's wider side sets the frame
            crop_w, crop_h = int(box_w * pad_factor), int(box_w / aspect * pad_factor)
        else:
            crop_w, crop_h = int(box_h * aspect * pad_factor), int(box_h * pad_factor)
        half_w, half_h = math.ceil(crop_w / 2), math.ceil(crop_h / 2)
        left, top = int(cx - half_w), int(cy - half_h)
        right, bottom = left + 2 * half_w, top + 2 * half_h
    else:
        left, top, right, bottom = 0, 0, width, height

    pad = (max(0, -left), max(0, right - width), max(0, -top), max(0, bottom - height))  # l, r, t, b
    if any(pad):
        img = torch.nn.functional.pad(img, pad, value=0.0)
        m = torch.nn.functional.pad(m, pad, value=0.0)
        left, right, top, bottom = left + pad[0], right + pad[0], top + pad[2], bottom + pad[2]
    img = img[..., top:bottom, left:right]
    m = m[..., top:bottom, left:right]
    fill = torch.tensor(background, dtype=img.dtype).view(1, 3, 1, 1)
    return (img * m + fill * (1.0 - m)).clamp(0, 1)


@v3_node("ImageCropToMask", display_name="Crop Image to Mask", category="image/transform", python_module=MODULE,
         search_aliases=["crop to mask", "mask crop", "crop mask", "mask crop resize", "crop mask resize",
                         "trellis2", "pixal3d"],
         inputs=[Socket("images", "IMAGE"), Socket("masks", "MASK"),
                 Int("width", default=1024, min=64, max=4096, step=8, tooltip="Output width in pixels."),
                 Int("height", default=1024, min=64, max=4096, step=8, tooltip="Output height in pixels."),
                 Float("pad_factor", default=1.0, min=1.0, max=2.0, step=0.01,
                       tooltip="Extra margin around the mask bounding box as a multiplier."),
                 Int("grow_mask", default=0, min=-32, max=32, step=1,
                     tooltip="Grow or shrink the mask by this many pixels before cropping."),
                 Widget("background", "COLOR", default="#000000",
                        tooltip="Background color behind the masked subject.")],
         outputs=[Output("IMAGE", "images")])
def image_crop_to_mask(images: Any, masks: Any, width: int, height: int, pad_factor: float, grow_mask: int,
                       background: str = "#000000") -> tuple[Any]:
    """Each image's subject framed, composited on `background` and resized to width x height."""
    import torch

    images = _image(images, "images")[..., :3]
    if not isinstance(masks, torch.Tensor) or masks.ndim != 3:
        raise NodeInputError("masks", "a MASK [B,H,W]", describe(masks))
    batch = images.shape[0]
    if masks.shape[0] == 1 and batch > 1:
        masks = masks.expand(batch, -1, -1)
    elif masks.shape[0] != batch:
        raise NodeInputError("masks", f"1 or {batch} masks (one per image)", f"{masks.shape[0]} masks")
    if masks.shape[-2:] != images.shape[1:3]:
        masks = upscale_samples(masks.unsqueeze(1).float(), images.shape[2], images.shape[1], "bilinear",
                                "disabled").squeeze(1)
    rgb = _hex_rgb(background)
    out = []
    for b in range(batch):
        framed = frame_subject(images[b], masks[b], max_size=max(width, height), pad_factor=pad_factor,
                               grow=grow_mask, background=rgb, aspect=width / height)
        out.append(upscale_samples(framed, width, height, "lanczos", "disabled").movedim(1, -1))
    return (torch.cat(out, dim=0).float(),)
