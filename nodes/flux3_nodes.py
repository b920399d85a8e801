"""The FLUX 3 Image templates' prompt-layout nodes: CreateBoundingBoxes (today's ComfyUI,
comfy_extras/nodes_bounding_boxes.py, a V3 output node with the editor's box canvas) and
Flux3LayoutPrompt (the boxes appended to a FLUX 3 prompt as its layout table).

CreateBoundingBoxes: the editor's `editor_state` widget (BOUNDING_BOXES) holds the drawn boxes in
canvas pixels, `{x, y, width, height, metadata: {type: "obj" | "text", text, desc, palette}}`;
an upstream `bboxes` value (pixel boxes, a frame of them, elements with a 0..1000
`[ymin, xmin, ymax, xmax]` bbox, or the same as a JSON string) replaces them when it differs
from `last_incoming` (the value the canvas last took in). Outputs: a preview image (the boxes,
their number tags, palette swatches and descriptions over a grey canvas or the dimmed
background), the boxes as one BOUNDING_BOX frame in canvas pixels (`[]` when there are none),
and the elements as Ideogram's prompt elements (`{type, bbox: [ymin, xmin, ymax, xmax] on the
0..1000 grid, text (text boxes), desc, color_palette (upper-cased, at most 5)}`). The UI gets the
canvas size, the upstream boxes and the background as a temp preview.

Flux3LayoutPrompt: ComfyUI's source could not be read (no stored commit has it); the node's
strings are those of the frontend package and ComfyUI's built-in node docs, and the layout
follows BFL's documented FLUX 3 box format (docs.bfl.ai/flux_3/flux3_image_bounding_boxes):
the caption, then a JSON array with one row per box, `{"id": "obj_N", "bbox": [top, left,
bottom, right], "desc": ...}` on the 0..1000 grid, N counting the elements from 1 (cite a box
in the prompt as `<obj_N>`). A text box's row quotes its wording in the description. No
elements: the prompt unchanged. Colour palettes are not used (the node's own tooltip says so).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from graph.spec import OPTIONAL, REQUIRED
from graph.v3_schema import FrontendWidget, Int, Output, Socket, String, v3_node
import nodes.checks as checks
from nodes.errors import NodeInputError

MODULE = "comfy_extras.nodes_bounding_boxes"
LAYOUT_MODULE = "comfy_extras.nodes_flux"  # inferred: ComfyUI's file for this node was not readable
PREVIEW_LONG_EDGE = 1024
PREVIEW_DIM = 0.25  # the background's brightness under the boxes (and the grey canvas: 0.25 * 128)
GRID = 1000
MAX_SWATCHES = 5
NO_PALETTE = (140, 140, 140)
BACKGROUND_PREFIX = "comfy.bboxes.background"

EDITOR_TOOLTIP = ("Draw bounding boxes and set each box type, text, description, color palette. Start with "
                  "background element first and foreground last.")
LAST_INCOMING_TOOLTIP = ("Internal state managed by the canvas: the upstream bboxes value that last initialized it. "
                         "Leave empty to re-initialize the canvas from the bboxes input on the next run.")
BBOXES_TOOLTIP = ("Bounding boxes, elements, or a JSON string to initialize the canvas. A new upstream value "
                  "initializes the canvas; edits made on the canvas take priority and are kept until the upstream "
                  "value changes again.")


def _boxes_widget(name: str, tooltip: str, *, optional: bool, socketless: bool) -> FrontendWidget:
    """V3's `BoundingBoxes.Input`: the editor's box list (default `[]`); `socketless` False keeps a socket."""
    return FrontendWidget(name, "BOUNDING_BOXES", OPTIONAL if optional else REQUIRED,
                          {"tooltip": tooltip, "default": [], "socketless": socketless})


# -- boxes, regions, elements -------------------------------------------------------------------------

def _box_error(expected: str, received: Any) -> NodeInputError:
    return NodeInputError("bboxes", expected, repr(received)[:200], node_type="CreateBoundingBoxes")


def _pixel_box(box: dict) -> dict:
    out = {key: box.get(key, 0) for key in ("x", "y", "width", "height")}
    if isinstance(box.get("metadata"), dict):
        out["metadata"] = box["metadata"]
    return out


def _is_element(value: dict) -> bool:
    bbox = value.get("bbox")
    return isinstance(bbox, (list, tuple)) and len(bbox) == 4


def _is_pixel_box(value: dict) -> bool:
    return all(key in value for key in ("x", "y", "width", "height"))


def elements_to_boxes(elements: list, width: int, height: int) -> list[dict]:
    """Prompt elements (0..1000 `[ymin, xmin, ymax, xmax]`) as pixel boxes with their metadata."""
    boxes = []
    for element in elements:
        if not isinstance(element, dict):
            continue
        if not _is_element(element):
            raise _box_error("an element with a 'bbox' [ymin, xmin, ymax, xmax]", element)
        try:
            ymin, xmin, ymax, xmax = (float(v) / GRID for v in element["bbox"])
        except (TypeError, ValueError):
            raise _box_error("a 'bbox' of four numbers", element["bbox"]) from None
        kind = "text" if element.get("type") == "text" else "obj"
        boxes.append({"x": round(min(xmin, xmax) * width), "y": round(min(ymin, ymax) * height),
                      "width": round(abs(xmax - xmin) * width), "height": round(abs(ymax - ymin) * height),
                      "metadata": {"type": kind, "text": element.get("text", "") if kind == "text" else "",
                                   "desc": element.get("desc", ""),
                                   "palette": element.get("color_palette", []) or []}})
    return boxes


def incoming_boxes(value: Any, width: int, height: int) -> list[dict]:
    """The upstream `bboxes` value as pixel boxes: None / "" -> []; a JSON string is parsed first; a
    box, a list of boxes or a frame list of them; an element or a list of elements."""
    if value is None:
        return []
    if isinstance(value, str):
        if not value.strip():
            return []
        try:
            value = json.loads(value)
        except ValueError as error:
            raise _box_error("bounding boxes or elements as JSON", f"invalid JSON ({error})") from None
    if isinstance(value, dict):
        if _is_element(value):
            return elements_to_boxes([value], width, height)
        if _is_pixel_box(value):
            return [_pixel_box(value)]
        raise _box_error("a bounding box (x, y, width, height) or an element (with a 'bbox')", value)
    if not isinstance(value, list):
        raise _box_error("bounding boxes, elements or a JSON string", type(value).__name__)
    if not value:
        return []
    first = value[0]
    if isinstance(first, list):  # a BOUNDING_BOX output: frames of boxes; the first frame
        return [_pixel_box(b) for b in first if isinstance(b, dict)]
    if isinstance(first, dict):
        if _is_element(first):
            return elements_to_boxes(value, width, height)
        if _is_pixel_box(first):
            return [_pixel_box(b) for b in value if isinstance(b, dict)]
        raise _box_error("bounding boxes (x, y, width, height) or elements (with a 'bbox')", first)
    raise _box_error("a list of bounding boxes or elements", type(first).__name__)


def boxes_to_regions(boxes: Any, width: int, height: int) -> list[dict]:
    """Pixel boxes as canvas fractions `{x, y, w, h}` with their type, text, description, palette."""
    regions: list[dict] = []
    for box in boxes if isinstance(boxes, list) else ():
        if not isinstance(box, dict):
            continue
        meta = box.get("metadata") if isinstance(box.get("metadata"), dict) else {}
        regions.append({"x": box.get("x", 0) / (width or 1), "y": box.get("y", 0) / (height or 1),
                        "w": box.get("width", 0) / (width or 1), "h": box.get("height", 0) / (height or 1),
                        "type": meta.get("type", "obj"), "text": meta.get("text", ""), "desc": meta.get("desc", ""),
                        "palette": meta.get("palette", [])})
    return regions


def _ordered(a: float, b: float) -> tuple[float, float]:
    return (a, b) if a <= b else (b, a)


def regions_to_frame(regions: list[dict], width: int, height: int) -> list:
    """The BOUNDING_BOX output: one frame of pixel boxes (negative extents flipped), `[]` for none."""
    boxes = []
    for r in regions:
        x0, x1 = _ordered(r["x"], r["x"] + r["w"])
        y0, y1 = _ordered(r["y"], r["y"] + r["h"])
        boxes.append({"x": round(x0 * width), "y": round(y0 * height), "width": round((x1 - x0) * width),
                      "height": round((y1 - y0) * height)})
    return [boxes] if boxes else []


def normalize_palette(colors: Any) -> list[str]:
    """Non-empty colour strings, upper-cased (a dict: its values)."""
    if isinstance(colors, dict):
        colors = colors.values()
    return [c.upper() for c in colors or () if isinstance(c, str) and c]


def regions_to_elements(regions: list[dict]) -> list[dict]:
    """Ideogram's prompt elements: `bbox` `[ymin, xmin, ymax, xmax]` rounded to the 0..1000 grid."""
    def grid(value: float) -> int:
        return max(0, min(GRID, round(value * GRID)))

    elements = []
    for r in regions:
        ymin, ymax = _ordered(grid(r["y"]), grid(r["y"] + r["h"]))
        xmin, xmax = _ordered(grid(r["x"]), grid(r["x"] + r["w"]))
        kind = "text" if r.get("type") == "text" else "obj"
        element: dict[str, Any] = {"type": kind, "bbox": [ymin, xmin, ymax, xmax]}
        if kind == "text":
            element["text"] = r.get("text", "")
        element["desc"] = r.get("desc", "")
        palette = normalize_palette(r.get("palette", []))
        if palette:
            element["color_palette"] = palette[:MAX_SWATCHES]
        elements.append(element)
    return elements


# -- the preview ----------------------------------------------------------------------------------------

def _rgb(value: str) -> tuple[int, int, int]:
    digits = value.lstrip("#")
    try:
        return tuple(int(digits[i:i + 2], 16) for i in (0, 2, 4)) if len(digits) == 6 else (255, 255, 255)
    except ValueError:
        return (255, 255, 255)


def _legible(rgb: tuple[int, int, int]) -> tuple[int, int, int]:
    """`rgb` lightened towards white until its luma reaches 130 (text on the dark canvas)."""
    luma = 0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2]
    if luma >= 130:
        return rgb
    t = (130 - luma) / (255 - luma)
    return tuple(round(c + (255 - c) * t) for c in rgb)


def render_preview(regions: list[dict], width: int, height: int, background: Any = None) -> Any:
    """`[1, H, W, 3]` float image: the canvas (long edge at most 1024) with every box outlined in
    its first palette colour, its palette swatches along the top, its 1-based number tag and its
    description (a text box: its quoted wording first)."""
    import numpy as np
    import torch
    from PIL import Image, ImageDraw, ImageEnhance, ImageFont

    def font(size: int) -> Any:
        try:
            return ImageFont.load_default(size)
        except TypeError:  # Pillow without sized default fonts
            return ImageFont.load_default()

    if background is not None:
        base = Image.fromarray((background[0].detach().cpu().numpy() * 255).clip(0, 255).astype(np.uint8))
        scale = min(1.0, PREVIEW_LONG_EDGE / (max(base.size) or 1))
        size = (max(1, round(base.size[0] * scale)), max(1, round(base.size[1] * scale)))
        canvas = ImageEnhance.Brightness(base.convert("RGB").resize(size, Image.LANCZOS)).enhance(PREVIEW_DIM)
        canvas = canvas.convert("RGBA")
    else:
        scale = min(1.0, PREVIEW_LONG_EDGE / (max(width, height) or 1))
        size = (max(1, round(width * scale)), max(1, round(height * scale)))
        grey = round(PREVIEW_DIM * 128)
        canvas = Image.new("RGBA", size, (grey, grey, grey, 255))
    rw, rh = size
    overlay = Image.new("RGBA", size, (0, 0, 0, 0))
    draw = ImageDraw.Draw(overlay)
    fs = max(10, round(rh / 64))
    body_font, tag_font = font(fs), font(max(9, fs - 2))
    for i, r in enumerate(regions):
        palette = [c for c in (r.get("palette") or []) if c]
        color = _rgb(palette[0]) if palette else NO_PALETTE
        x1, x2 = _ordered(*(max(0, min(rw, round(v * rw))) for v in (r["x"], r["x"] + r["w"])))
        y1, y2 = _ordered(*(max(0, min(rh, round(v * rh))) for v in (r["y"], r["y"] + r["h"])))
        draw.rectangle([x1, y1, x2, y2], outline=color + (255,), width=2)
        swatches = palette[:MAX_SWATCHES]
        if swatches and x2 - x1 > 2:
            step = (x2 - x1) / len(swatches)
            for k, swatch in enumerate(swatches):
                draw.rectangle([x1 + round(k * step), y1, x1 + round((k + 1) * step), y1 + max(5, fs // 2)],
                               fill=_rgb(swatch))
        tag = f"{i + 1:02d}"
        draw.rectangle([x1, y1, x1 + draw.textlength(tag, font=tag_font) + 6, y1 + fs + 2], fill=color + (255,))
        bright = 0.299 * color[0] + 0.587 * color[1] + 0.114 * color[2] > 140
        draw.text((x1 + 3, y1 + 1), tag, fill=(0, 0, 0, 255) if bright else (255, 255, 255, 255), font=tag_font)
        body = r.get("desc") or ""
        if r.get("type") == "text" and r.get("text"):
            body = f'"{r["text"]}"' + (f" — {body}" if body else "")
        ty = y1 + fs + 5
        for line in _wrap(draw, body, body_font, x2 - x1 - 8) if body and x2 - x1 > 8 else ():
            if ty > y2:
                break
            draw.text((x1 + 4, ty), line, fill=_legible(color) + (255,), font=body_font)
            ty += fs + 2
    composed = Image.alpha_composite(canvas, overlay).convert("RGB")
    return torch.from_numpy(np.asarray(composed, dtype=np.float32) / 255.0).unsqueeze(0)


def _wrap(draw: Any, text: str, font: Any, max_width: float) -> list[str]:
    lines = []
    for paragraph in text.split("\n"):
        line = ""
        for word in paragraph.split():
            trial = f"{line} {word}" if line else word
            if line and draw.textlength(trial, font=font) > max_width:
                lines.append(line)
                line = word
            else:
                line = trial
        lines.append(line)
    return lines


# -- the nodes ------------------------------------------------------------------------------------------

@v3_node("CreateBoundingBoxes", display_name="Create Bounding Boxes", category="utilities", python_module=MODULE,
         description=("Draw bounding boxes in a canvas. Outputs Ideogram prompt elements, pixel-space bounding "
                      "boxes, and a preview image."), output_node=True, experimental=True,
         inputs=[Socket("background", "IMAGE", optional=True,
                        tooltip="Optional image used as background in the canvas and preview."),
                 Socket("bboxes", "BOUNDING_BOX,ARRAY,STRING", optional=True, tooltip=BBOXES_TOOLTIP),
                 Int("width", default=1024, min=64, max=16384, step=16,
                     tooltip="Width of the canvas and the pixel grid for the bounding boxes."),
                 Int("height", default=1024, min=64, max=16384, step=16,
                     tooltip="Height of the canvas and the pixel grid for the bounding boxes."),
                 _boxes_widget("editor_state", EDITOR_TOOLTIP, optional=False, socketless=False),
                 _boxes_widget("last_incoming", LAST_INCOMING_TOOLTIP, optional=True, socketless=True)],
         outputs=[Output("IMAGE", "preview"), Output("BOUNDING_BOX", "bboxes"), Output("ARRAY", "elements")])
def create_bounding_boxes(width: int, height: int, editor_state: Any = None, last_incoming: Any = None,
                          background: Any = None, bboxes: Any = None, **_hidden: Any) -> dict:
    """The canvas's boxes (or the upstream ones when they changed) as a preview, a pixel frame and
    prompt elements; see the module docstring."""
    width = checks.integer(width, "width", 64, 16384)
    height = checks.integer(height, "height", 64, 16384)
    if editor_state is not None and not isinstance(editor_state, list):
        raise NodeInputError("editor_state", "a list of boxes", type(editor_state).__name__)
    incoming = incoming_boxes(bboxes, width, height)
    applied = last_incoming if isinstance(last_incoming, list) else []
    source = incoming if incoming and incoming != applied else (editor_state or [])
    regions = boxes_to_regions(source, width, height)
    preview = render_preview(regions, width, height, background)
    ui: dict[str, Any] = {"dims": [width, height]}
    if incoming:
        ui["input_bboxes"] = incoming
    if background is not None and len(background) > 0:
        ui["background_images"] = _save_background(background[:1])
    return {"result": (preview, regions_to_frame(regions, width, height), regions_to_elements(regions)), "ui": ui}


def _save_background(image: Any) -> list[dict]:
    """The background as a temp preview (`comfy.bboxes.background_*`), for the canvas to show."""
    from comfy_core.image.png import preview_target, save_images
    from nodes.environment import current_env

    target = preview_target(current_env().temp_dir)
    return save_images(image, Path(target.output_dir), BACKGROUND_PREFIX + target.prefix_append,
                       folder_type=target.type, compress_level=target.compress_level, metadata=False)


def layout_rows(elements: Any) -> list[dict]:
    """BFL's layout rows of prompt elements: `{"id": "obj_N", "bbox": [top, left, bottom, right],
    "desc": ...}`, N from 1; a text element's wording quoted at the front of its description."""
    if not isinstance(elements, list):
        raise NodeInputError("element", "a list of prompt elements (Create Bounding Boxes' elements)",
                             type(elements).__name__)
    rows = []
    for n, element in enumerate(elements, start=1):
        bbox = element.get("bbox") if isinstance(element, dict) else None
        if not (isinstance(bbox, (list, tuple)) and len(bbox) == 4
                and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in bbox)):
            raise NodeInputError("element", "elements with a 'bbox' of four numbers [ymin, xmin, ymax, xmax]",
                                 repr(element)[:200])
        desc = str(element.get("desc", "") or "")
        if element.get("type") == "text" and element.get("text"):
            desc = f'"{element["text"]}"' + (f" {desc}" if desc else "")
        rows.append({"id": f"obj_{n}", "bbox": [int(round(v)) for v in bbox], "desc": desc})
    return rows


@v3_node("Flux3LayoutPrompt", display_name="FLUX 3 Image Layout Prompt", category="advanced/conditioning/flux",
         python_module=LAYOUT_MODULE,
         description="Appends the boxes from Create Bounding Boxes to a FLUX 3 Image prompt as its layout table.",
         inputs=[String("prompt", multiline=True, tooltip="The prompt text. Cite box N as <obj_N> to tie words to it."),
                 Socket("element", "ARRAY", tooltip=("Prompt elements from the node Create Bounding Boxes. Colour "
                                                     "palettes are not used, describe colours in the description."))],
         outputs=[Output("STRING", "prompt")])
def flux3_layout_prompt(prompt: str, element: Any) -> tuple[str]:
    """`prompt`, a space and the compact JSON layout table (no elements: `prompt` unchanged)."""
    if not isinstance(prompt, str):
        raise NodeInputError("prompt", "a string", type(prompt).__name__)
    rows = layout_rows(element)
    if not rows:
        return (prompt,)
    table = json.dumps(rows, ensure_ascii=False, separators=(",", ":"))
    return (f"{prompt} {table}" if prompt else table,)
