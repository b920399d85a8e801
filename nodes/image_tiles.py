"""Tiles and bounding boxes of today's ComfyUI (2026), declared as its V3 schema renders them
(graph/v3_schema.py); behaviour read from ComfyUI's files, written here.

* PrimitiveBoundingBox ("Bounding Box", comfy_extras/nodes_images.py): four integers as one
  BOUNDING_BOX `{"x", "y", "width", "height"}`.
* SplitImageToTileList / ImageMergeTileList (comfy_extras/nodes_images.py): an image cut into a
  grid of overlapping tiles, handed on as a list (the consumer runs once per tile), and a list of
  tiles blended back into one image. The grid steps by `tile - overlap` (at least a quarter of
  the tile); the last tile of a row or column is moved back inside the image, so every tile has
  the full tile size when the image is at least that big. Merging weighs each tile by a sine
  window (`sin(pi t)` over its rows times over its columns, floored at 1e-5) when the tiles
  overlap, uniformly when they do not, and divides by the summed weights: tiles cut from one
  image merge back into that image.
* CropByBBoxes ("Crop By Bounding Boxes", comfy_extras/nodes_sdpose.py): per image, the union of
  its boxes (grown by `padding`, kept inside the image) cut out and resized ("area") to the
  output size, stretched or fitted and centred on black; all crops as one batch. A box list
  shorter than the batch repeats its last entry; an image without boxes gives no crop; a box
  that leaves nothing falls back to a centred square of 30% of the shorter side at 10% height.
  The node previews the first source image and reports the first image's boxes to the editor
  (`source_images`, `input_bboxes`).

Not here, because no readable ComfyUI file defines them (see the report of this change):
PadImageNode, ImageSDRToHDR; ImageCompositor and LayersFromBoundingBoxes
(comfy_extras/nodes_compositor.py is not in the reference index).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graph.v3_schema import Combo, Int, Output, Socket, v3_node
from nodes.environment import current_env
from nodes.errors import NodeInputError, describe

if TYPE_CHECKING:
    import torch

IMAGES_MODULE = "comfy_extras.nodes_images"
SDPOSE_MODULE = "comfy_extras.nodes_sdpose"
MAX_RESOLUTION = 16384  # ComfyUI's nodes.MAX_RESOLUTION
BOX_KEYS = ("x", "y", "width", "height")
WINDOW_FLOOR = 1e-5  # the sine window's smallest weight, so border pixels still count
KEEP_ASPECT = ["stretch", "pad"]
TILE_ALIASES = ["split image", "tile image", "slice image"]


def _image(value: Any, name: str) -> "torch.Tensor":
    import torch

    if not isinstance(value, torch.Tensor) or value.ndim != 4:
        raise NodeInputError(name, "an IMAGE [B,H,W,C]", describe(value))
    return value


# -- PrimitiveBoundingBox --------------------------------------------------------------------------

@v3_node("PrimitiveBoundingBox", display_name="Bounding Box", category="utilities/primitive",
         python_module=IMAGES_MODULE,
         inputs=[Int("x", default=0, min=0, max=MAX_RESOLUTION), Int("y", default=0, min=0, max=MAX_RESOLUTION),
                 Int("width", default=512, min=1, max=MAX_RESOLUTION),
                 Int("height", default=512, min=1, max=MAX_RESOLUTION)],
         outputs=[Output("BOUNDING_BOX")])
def primitive_bounding_box(x: int, y: int, width: int, height: int) -> tuple[dict]:
    """The box as ComfyUI's BOUNDING_BOX dict."""
    return ({"x": x, "y": y, "width": width, "height": height},)


# -- tiles -----------------------------------------------------------------------------------------

def _spans(size: int, tile: int, overlap: int) -> list[tuple[int, int]]:
    """The `[start, end)` spans of one axis: starts 0, stride, 2 stride, ... (stride = tile -
    overlap, at least tile / 4, rounded half to even as Python rounds), each span cut at `size`
    and moved back to the full tile length where it can be; the first span reaching `size` ends
    the axis."""
    stride = round(max(tile * 0.25, tile - overlap))
    spans = []
    start = 0
    while start < size:
        end = min(start + tile, size)
        spans.append((max(0, end - tile), end))
        if end >= size:
            break
        start += stride
    return spans


def tile_grid(width: int, height: int, tile_width: int, tile_height: int,
              overlap: int) -> list[tuple[int, int, int, int]]:
    """Tile corners `(x0, y0, x1, y1)`, row by row (ComfyUI's `get_grid_coords`)."""
    rows = _spans(height, tile_height, overlap)
    cols = _spans(width, tile_width, overlap)
    return [(x0, y0, x1, y1) for (y0, y1) in rows for (x0, x1) in cols]


@v3_node("SplitImageToTileList", display_name="Split Image into List of Tiles", category="image/batch",
         python_module=IMAGES_MODULE, search_aliases=TILE_ALIASES,
         description="Splits an image into a batched list of tiles with a specified overlap.",
         inputs=[Socket("image", "IMAGE"),
                 Int("tile_width", default=1024, min=64, max=MAX_RESOLUTION),
                 Int("tile_height", default=1024, min=64, max=MAX_RESOLUTION),
                 Int("overlap", default=128, min=0, max=4096)],
         outputs=[Output("IMAGE", is_list=True)])
def split_image_to_tile_list(image: Any, tile_width: int, tile_height: int, overlap: int) -> tuple[list]:
    """The tiles (each the whole batch's `[B, h, w, C]` window), row by row."""
    image = _image(image, "image")
    corners = tile_grid(image.shape[2], image.shape[1], tile_width, tile_height, overlap)
    return ([image[:, y0:y1, x0:x1, :] for (x0, y0, x1, y1) in corners],)


def _window(tile_h: int, tile_w: int, overlap: int, like: "torch.Tensor") -> "torch.Tensor":
    """The `[1, h, w, 1]` blending weight of a tile: an outer product of sine bumps when tiles
    overlap, ones otherwise."""
    import torch

    if overlap <= 0:
        return torch.ones((1, tile_h, tile_w, 1), device=like.device, dtype=like.dtype)
    rows = torch.linspace(0, 1, tile_h, device=like.device, dtype=like.dtype).mul(math.pi).sin().clamp(min=WINDOW_FLOOR)
    cols = torch.linspace(0, 1, tile_w, device=like.device, dtype=like.dtype).mul(math.pi).sin().clamp(min=WINDOW_FLOOR)
    return torch.outer(rows, cols)[None, :, :, None]


def merge_tiles(tiles: list["torch.Tensor"], width: int, height: int, overlap: int) -> "torch.Tensor":
    """Blend `tiles` (in `tile_grid` order, all of the first tile's size) into a `[B, height,
    width, C]` image; pixels no tile covers stay 0. Extra tiles are ignored, missing ones leave
    their area to the others."""
    import torch

    first = tiles[0]
    batch, tile_h, tile_w, channels = first.shape
    total = torch.zeros((batch, height, width, channels), device=first.device, dtype=first.dtype)
    weight = torch.zeros((batch, height, width, 1), device=first.device, dtype=first.dtype)
    window = _window(tile_h, tile_w, overlap, first)
    for tile, (x0, y0, x1, y1) in zip(tiles, tile_grid(width, height, tile_w, tile_h, overlap)):
        h, w = min(y1 - y0, tile.shape[1]), min(x1 - x0, tile.shape[2])
        part = window[:, :h, :w, :]
        total[:, y0:y0 + h, x0:x0 + w, :] += tile[:, :h, :w, :] * part
        weight[:, y0:y0 + h, x0:x0 + w, :] += part
    return total / torch.where(weight == 0, torch.ones_like(weight), weight)


def _first(values: Any, name: str) -> Any:
    """An input-list node's scalar input: the first value of its list (ComfyUI reads `[0]`)."""
    if isinstance(values, list):
        if not values:
            raise NodeInputError(name, "a value", "an empty list")
        return values[0]
    return values


@v3_node("ImageMergeTileList", display_name="Merge List of Tiles to Image", category="image/batch",
         python_module=IMAGES_MODULE, search_aliases=TILE_ALIASES, input_is_list=True,
         inputs=[Socket("image_list", "IMAGE"),
                 Int("final_width", default=1024, min=64, max=32768),
                 Int("final_height", default=1024, min=64, max=32768),
                 Int("overlap", default=128, min=0, max=4096)],
         outputs=[Output("IMAGE")])
def image_merge_tile_list(image_list: Any, final_width: Any, final_height: Any, overlap: Any) -> tuple[Any]:
    """The tiles of `SplitImageToTileList` (same size and overlap) blended into one image."""
    tiles = image_list if isinstance(image_list, list) else [image_list]
    if not tiles:
        raise NodeInputError("image_list", "at least one IMAGE tile", "an empty list")
    for i, tile in enumerate(tiles):
        _image(tile, f"image_list[{i}]")
    return (merge_tiles(tiles, int(_first(final_width, "final_width")), int(_first(final_height, "final_height")),
                        int(_first(overlap, "overlap"))),)


# -- CropByBBoxes ----------------------------------------------------------------------------------

def _boxes_per_image(bboxes: Any) -> list[list[dict]]:
    """BOUNDING_BOX as a list per image: one dict is every image's single box, a list of dicts
    every image's boxes (as nodes/sdpose_nodes.py reads them), a list of lists one entry per
    image."""
    def box(value: Any) -> dict:
        if not isinstance(value, dict) or any(k not in value for k in BOX_KEYS):
            raise NodeInputError("bboxes", "bounding boxes {x, y, width, height}", describe(value))
        return value

    if isinstance(bboxes, dict):
        return [[box(bboxes)]]
    if not isinstance(bboxes, (list, tuple)):
        raise NodeInputError("bboxes", "BOUNDING_BOX (a list per image of {x, y, width, height})", describe(bboxes))
    if bboxes and all(isinstance(b, dict) for b in bboxes):
        return [[box(b) for b in bboxes]]
    return [[box(b) for b in (frame if isinstance(frame, (list, tuple)) else [frame])] for frame in bboxes]


def crop_region(boxes: list[dict], width: int, height: int, padding: int) -> tuple[int, int, int, int] | None:
    """The union of `boxes` grown by `padding`, inside the image, as `(x0, y0, x1, y1)`; when
    nothing is left, the fallback square (30% of the shorter side, centred, at 10% height), or
    None when even that is empty."""
    x0 = min(int(b["x"]) for b in boxes)
    y0 = min(int(b["y"]) for b in boxes)
    x1 = max(int(b["x"] + b["width"]) for b in boxes)
    y1 = max(int(b["y"] + b["height"]) for b in boxes)
    if padding > 0:
        x0, y0, x1, y1 = x0 - padding, y0 - padding, x1 + padding, y1 + padding
    x0, y0, x1, y1 = max(0, x0), max(0, y0), min(width, x1), min(height, y1)
    if x1 > x0 and y1 > y0:
        return x0, y0, x1, y1
    side = int(min(height, width) * 0.3)
    x0, y0 = max(0, (width - side) // 2), max(0, int(height * 0.1))
    x1, y1 = min(width, x0 + side), min(height, y0 + side)
    return (x0, y0, x1, y1) if x1 > x0 and y1 > y0 else None


def crop_and_fit(frame: "torch.Tensor", region: tuple[int, int, int, int] | None, out_w: int, out_h: int,
                 keep_aspect: str) -> "torch.Tensor":
    """One image `[H, W, C]` -> its region resized ("area") to `[1, C, out_h, out_w]`:
    stretched, or scaled to fit and centred on zeros ("pad"). No region: all zeros."""
    import torch

    from comfy_core.image.resize import upscale_samples

    channels = frame.shape[-1]
    blank = torch.zeros(1, channels, out_h, out_w, dtype=frame.dtype, device=frame.device)
    if region is None:
        return blank
    x0, y0, x1, y1 = region
    piece = frame[y0:y1, x0:x1, :].permute(2, 0, 1).unsqueeze(0)  # [1, C, h, w]
    if keep_aspect != "pad":
        return upscale_samples(piece, out_w, out_h, "area", "disabled")
    scale = min(out_w / (x1 - x0), out_h / (y1 - y0))
    fit_w, fit_h = int(round((x1 - x0) * scale)), int(round((y1 - y0) * scale))
    left, top = (out_w - fit_w) // 2, (out_h - fit_h) // 2
    blank[:, :, top:top + fit_h, left:left + fit_w] = upscale_samples(piece, fit_w, fit_h, "area", "disabled")
    return blank


@v3_node("CropByBBoxes", display_name="Crop By Bounding Boxes", category="image/transform",
         python_module=SDPOSE_MODULE, has_intermediate_output=True,
         search_aliases=["crop", "face crop", "bbox crop", "pose", "bounding box"],
         description="Crop and resize regions from the input image batch based on provided bounding boxes.",
         inputs=[Socket("image", "IMAGE"),
                 Socket("bboxes", "BOUNDING_BOX", default={"x": 0, "y": 0, "width": 512, "height": 512},
                        socketless=True, forceInput=True),
                 Int("output_width", default=512, min=64, max=4096, step=8, tooltip="Width each crop is resized to."),
                 Int("output_height", default=512, min=64, max=4096, step=8,
                     tooltip="Height each crop is resized to."),
                 Int("padding", default=0, min=0, max=1024, step=1,
                     tooltip="Extra padding in pixels added on each side of the bbox before cropping."),
                 Combo("keep_aspect", KEEP_ASPECT, default="stretch",
                       tooltip="Whether to stretch the crop to fit the output size, or pad with black pixels to "
                               "preserve aspect ratio.")],
         outputs=[Output("IMAGE", tooltip="All crops stacked into a single image batch.")])
def crop_by_bboxes(image: Any, bboxes: Any, output_width: int, output_height: int, padding: int,
                   keep_aspect: str = "stretch") -> Any:
    """Each image's boxes' crop, resized, as one batch (the input unchanged when no image has
    boxes), with the editor's preview of the first image and its boxes."""
    import torch

    from comfy_core.image.png import preview_target, save_images

    image = _image(image, "image")
    if keep_aspect not in KEEP_ASPECT:
        raise NodeInputError("keep_aspect", f"one of {KEEP_ASPECT}", repr(keep_aspect))
    if isinstance(bboxes, (list, tuple)) and len(bboxes) == 0:
        return (image,)
    per_image = _boxes_per_image(bboxes)
    target = preview_target(current_env().temp_dir)
    ui = {"source_images": save_images(image[:1], Path(target.output_dir),
                                       "comfy.crop_bboxes.source" + target.prefix_append, folder_type=target.type,
                                       compress_level=target.compress_level, metadata=False),
          "input_bboxes": [{k: int(b[k]) for k in BOX_KEYS} for b in per_image[0]]}
    height, width = image.shape[1], image.shape[2]
    crops = []
    for index in range(image.shape[0]):
        boxes = per_image[min(index, len(per_image) - 1)]
        if not boxes:
            continue
        region = crop_region(boxes, width, height, padding)
        crops.append(crop_and_fit(image[index], region, output_width, output_height, keep_aspect))
    if not crops:
        return {"result": (image,), "ui": ui}
    return {"result": (torch.cat(crops, dim=0).permute(0, 2, 3, 1),), "ui": ui}
