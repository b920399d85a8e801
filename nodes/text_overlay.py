"""TextOverlay ("Draw Text Overlay") of ComfyUI's comfy_extras/nodes_text_overlay.py (2026), declared
as ComfyUI's V3 schema renders it (graph/v3_schema.py); behaviour read from that file
(Comfy-Org/ComfyUI@b45873d0414b436621e93e8440caf307ed725739), written here.

The text is drawn once with Pillow onto a transparent layer the size of the frames and composited
over every image of the batch: RGB images as `image * (1 - a) + colour * a`, RGBA ones with
premultiplied source-over (the result's alpha `a + (1 - a) * alpha`). Layout, as ComfyUI's:

* the font is a file of the `fonts` folder (ComfyUI's `folder_paths` kind "fonts", `<base>/fonts`),
  or Pillow's own default font when none is chosen; its size is `font_size` percent of the image
  height, shrunk by 10% steps (not below max(10 px, 2% of the height), nor above the start) until
  the wrapped block fits inside the margins (1% of the shorter side);
* lines are wrapped on spaces to the width inside the margins; a word wider than that is cut;
  `\\n` and `\\t` typed as two characters are a newline and a tab;
* lines are 1.2 x the font size apart; the block sits flush against the top or bottom margin and
  is aligned left, centred or right; `outline` draws a black stroke of 4% of the font size.

One difference: ComfyUI re-reads the chosen font by name on each shrinking step but passes the
font object it loaded on the first one, which fails; here the name is kept, so the text shrinks.
Empty (or blank) text returns the images unchanged.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from comfy_core.folders import KIND_EXTENSIONS
from graph.spec import REQUIRED, InputSpec
from graph.v3_schema import Boolean, Combo, Float, Output, Socket, String, v3_node
from nodes.environment import current_env, model_files
from nodes.errors import NodeInputError, describe

if TYPE_CHECKING:
    import torch

MODULE = "comfy_extras.nodes_text_overlay"
FONT_KIND = "fonts"
FONT_EXTENSIONS = tuple(sorted(KIND_EXTENSIONS[FONT_KIND]))  # ComfyUI's folder_paths: .ttf, .otf
LINE_SPACING = 1.2  # line pitch, in font sizes
MARGIN_PERCENT = 1.0  # of the shorter side
MIN_FONT_PERCENT = 2.0  # of the height: the shrinking floor...
MIN_FONT_PIXELS = 10  # ...and not below this
OUTLINE_FACTOR = 0.04  # stroke width, in font sizes

_font_files = model_files(FONT_KIND, FONT_EXTENSIONS)  # the combo's live options


def wrap_text(text: str, width_of: Callable[[str], float], max_width: float) -> list[str]:
    """`text`'s lines broken on whitespace so each fits `max_width` (as measured by `width_of`); a
    word wider than that is cut into pieces that fit (at least one character each); an empty
    line stays an empty line."""
    lines: list[str] = []
    for raw in text.split("\n"):
        words = raw.split()
        if not words:
            lines.append("")
            continue
        current = ""
        for word in words:
            while len(word) > 1 and width_of(word) > max_width:
                cut = 1
                while cut < len(word) and width_of(word[:cut + 1]) <= max_width:
                    cut += 1
                if current:
                    lines.append(current)
                    current = ""
                lines.append(word[:cut])
                word = word[cut:]
            joined = f"{current} {word}" if current else word
            if not current or width_of(joined) <= max_width:
                current = joined
            else:
                lines.append(current)
                current = word
        if current:
            lines.append(current)
    return lines


def _rgba(color: Any) -> tuple[int, int, int, int]:
    from PIL import ImageColor

    try:
        parsed = ImageColor.getrgb(str(color))
    except ValueError:
        raise NodeInputError("color", "a colour (#rrggbb, #rrggbbaa or a CSS colour name)", repr(color)) from None
    return (*parsed, 255) if len(parsed) == 3 else parsed  # type: ignore[return-value]


def _font_loader(font: Any) -> Callable[[int], Any]:
    """size -> a Pillow font: the `fonts` folder's file `font`, or Pillow's default when empty."""
    from PIL import ImageFont

    if not font:
        return lambda size: ImageFont.load_default(size=size)
    path = current_env().folders.full_path(FONT_KIND, font) if isinstance(font, str) else None
    if path is None:
        raise NodeInputError("font", "a font file of the fonts folder", repr(font))
    try:
        ImageFont.truetype(str(path), 10)
    except OSError as exc:
        raise NodeInputError("font", "a TrueType or OpenType font file", f"{font!r} ({exc})") from None
    return lambda size: ImageFont.truetype(str(path), size)


def render_overlay(width: int, height: int, text: str, position: str, align: str, load_font: Callable[[int], Any],
                   font_size: float, fill: tuple, stroke_fill: tuple) -> tuple["torch.Tensor", "torch.Tensor"]:
    """The text drawn on a transparent `width` x `height` layer: (rgb `[H,W,3]`, alpha `[H,W,1]`) in 0..1."""
    import numpy as np
    import torch
    from PIL import Image, ImageDraw

    layer = Image.new("RGBA", (width, height), (0, 0, 0, 0))
    draw = ImageDraw.Draw(layer)
    margin = int(round(MARGIN_PERCENT / 100.0 * min(width, height)))
    max_width, max_height = max(1, width - 2 * margin), max(1, height - 2 * margin)
    size = max(1, int(round(font_size / 100.0 * height)))
    floor = min(size, max(MIN_FONT_PIXELS, int(round(MIN_FONT_PERCENT / 100.0 * height))))
    while True:
        font = load_font(size)
        stroke = max(1, int(round(size * OUTLINE_FACTOR))) if stroke_fill[3] > 0 else 0
        block = "\n".join(wrap_text(text, font.getlength, max_width))
        # the line pitch in pixels: size * 1.2, less the advance the font already puts between lines
        one = draw.textbbox((0, 0), "Ay", font=font, stroke_width=stroke)
        two = draw.multiline_textbbox((0, 0), "Ay\nAy", font=font, spacing=0, stroke_width=stroke)
        spacing = int(round(size * LINE_SPACING - ((two[3] - two[1]) - (one[3] - one[1]))))
        box = draw.multiline_textbbox((0, 0), block, font=font, spacing=spacing, stroke_width=stroke)
        if box[3] - box[1] <= max_height or size <= floor:
            break
        size = max(floor, int(size * 0.9))
    anchor, x = {"left": ("l", margin), "center": ("m", width / 2), "right": ("r", width - margin)}[align]
    y = height - margin - box[3] if position == "bottom" else margin - box[1]  # flush against the margin
    draw.multiline_text((x, y), block, font=font, fill=fill, anchor=anchor + "a", align=align, spacing=spacing,
                        stroke_width=stroke, stroke_fill=stroke_fill)
    pixels = torch.from_numpy(np.asarray(layer, dtype=np.float32) / 255.0)  # [H,W,4]
    return pixels[..., :3], pixels[..., 3:4]


def composite(images: "torch.Tensor", rgb: "torch.Tensor", alpha: "torch.Tensor") -> "torch.Tensor":
    """The layer over every frame: plain blending for RGB, premultiplied source-over for RGBA."""
    import torch

    rgb, alpha = rgb.to(images), alpha.to(images)
    if images.shape[-1] == 4:
        under, under_alpha = images[..., :3], images[..., 3:]
        out_alpha = alpha + (1.0 - alpha) * under_alpha
        premultiplied = rgb * alpha + (1.0 - alpha) * under * under_alpha
        out_rgb = torch.where(out_alpha > 1e-5, premultiplied / out_alpha, torch.zeros_like(premultiplied))
        return torch.cat((out_rgb.clamp(0, 1), out_alpha), dim=-1)
    return images * (1.0 - alpha) + rgb * alpha


@v3_node("TextOverlay", display_name="Draw Text Overlay", category="text", python_module=MODULE,
         description="Draw text overlay on an image or batch of images.",
         search_aliases=["text", "label", "caption", "subtitle", "watermark", "title", "addlabel", "overlay"],
         inputs=[Socket("images", "IMAGE"),
                 String("text", default="", multiline=True),
                 InputSpec("font", _font_files, REQUIRED, {"multiselect": False}),  # the fonts folder, live
                 Float("font_size", default=5.0, min=0.5, max=50.0, step=0.5,
                       tooltip="Font size as a percentage of the image height."),
                 InputSpec("color", "COLOR", REQUIRED,
                           {"tooltip": "Color of the text.", "default": "#ffffff", "socketless": True}),
                 Combo("position", ["top", "bottom"], default="top"),
                 Combo("align", ["left", "center", "right"], default="left"),
                 Boolean("outline", default=True, tooltip="Draw a black outline around the text.")],
         outputs=[Output("IMAGE", "images")])
def text_overlay(images: Any, text: str, font: str, font_size: float, color: str, position: str, align: str,
                 outline: bool) -> tuple["torch.Tensor"]:
    """The images with `text` drawn over them (see the module docstring)."""
    import torch

    if not isinstance(images, torch.Tensor) or images.ndim != 4 or images.shape[-1] not in (1, 3, 4):
        raise NodeInputError("images", "an IMAGE [B,H,W,C]", describe(images))
    if not isinstance(text, str):
        raise NodeInputError("text", "a string", describe(text))
    if text.strip() == "":
        return (images,)
    if position not in ("top", "bottom"):
        raise NodeInputError("position", "top or bottom", repr(position))
    if align not in ("left", "center", "right"):
        raise NodeInputError("align", "left, center or right", repr(align))
    text = text.replace("\\n", "\n").replace("\\t", "\t")
    fill = _rgba(color)
    stroke_fill = (0, 0, 0, 255) if outline else (0, 0, 0, 0)
    rgb, alpha = render_overlay(int(images.shape[2]), int(images.shape[1]), text, position, align,
                                _font_loader(font), float(font_size), fill, stroke_fill)
    return (composite(images, rgb, alpha),)
