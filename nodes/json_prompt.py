"""BuildJsonPromptIdeogram (today's ComfyUI, comfy_extras/nodes_json_prompt.py, a V3 node; read as
comfyanonymous/ComfyUI@77cb84873a7119c97f4832f17506de4f1e5e611b): Ideogram 4's structured caption
as a DICT, to write out with Convert Dictionary to String or feed to a text encoder node.

The caption, in this key order (Ideogram 4 reads it as JSON):

* `high_level_description`, only when it holds more than white space;
* `style_description`, only when `style` is not "none": `aesthetics`, `lighting`, then for
  "photo" `photo` and `medium`, for "art_style" `medium` and `art_style` (the style strings are
  sent even when blank), and `color_palette` (the palette's non-empty strings upper-cased) when
  the palette has any;
* `compositional_deconstruction`: `background` and `elements` (Create Bounding Boxes' prompt
  elements as they come; anything but a list counts as no elements).

`style` is a dynamic combo: the editor sends `style` and, for the option chosen, `style.photo` or
`style.art_style`; the node receives `{"style": "photo", "photo": "..."}` as ComfyUI's does.
`color_palette` is the editor's colour list widget (with a socket, `socketless` false).
"""
from __future__ import annotations

from typing import Any

from graph.spec import REQUIRED
from graph.v3_schema import ComboOption, DynamicCombo, FrontendWidget, Output, Socket, String, v3_node
from nodes.errors import NodeInputError, describe
from nodes.flux3_nodes import normalize_palette  # ComfyUI's comfy_extras/color_util.normalize_palette

MODULE = "comfy_extras.nodes_json_prompt"

PALETTE_TOOLTIP = "Hex color codes that steer the image's dominant colors. Up to 16 entries."


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise NodeInputError(name, "a STRING", describe(value))
    return value


def ideogram_caption(elements: Any, style: str = "none", *, photo: str = "", art_style: str = "",
                     high_level_description: str = "", background: str = "", aesthetics: str = "",
                     lighting: str = "", medium: str = "", color_palette: Any = None) -> dict:
    """Ideogram 4's caption dict (see the module docstring for its keys and their order)."""
    caption: dict[str, Any] = {}
    if high_level_description.strip():
        caption["high_level_description"] = high_level_description
    if style != "none":
        described: dict[str, Any] = {"aesthetics": aesthetics, "lighting": lighting}
        if style == "photo":
            described.update(photo=photo, medium=medium)
        else:
            described.update(medium=medium, art_style=art_style)
        palette = normalize_palette(color_palette or [])
        if palette:
            described["color_palette"] = palette
        caption["style_description"] = described
    caption["compositional_deconstruction"] = {"background": background,
                                               "elements": elements if isinstance(elements, list) else []}
    return caption


@v3_node("BuildJsonPromptIdeogram", display_name="Build JSON Prompt (Ideogram)", category="text",
         python_module=MODULE, description="Build a JSON prompt for the Ideogram 4 model.", experimental=True,
         inputs=[Socket("element", "ARRAY", tooltip="Prompt elements from the node Create Bounding Boxes."),
                 String("high_level_description", multiline=True, default="",
                        tooltip="Optional description of the image in one or two sentences. Strongly recommended."),
                 String("background", multiline=True, default="",
                        tooltip="Mandatory description of the image background or environment."),
                 DynamicCombo("style", (
                     ComboOption("none"),
                     ComboOption("photo", (String("photo", default="", tooltip=(
                         "Camera or lens details for photographic outputs (e.g. 35mm, f/1.4, bokeh).")),)),
                     ComboOption("art_style", (String("art_style", default="", tooltip=(
                         "Art style description (e.g. flat vector illustration, bold outlines).")),)))),
                 String("aesthetics", default="",
                        tooltip="Mandatory aesthetic keywords (e.g. moody, cinematic, desaturated)."),
                 String("lighting", default="",
                        tooltip="Mandatory lighting description (e.g. golden hour, rim light, dramatic shadows)."),
                 String("medium", default="",
                        tooltip=("Mandatory medium type (e.g. photograph, illustration, 3d_render, painting, "
                                 "graphic_design). When style = photo, set to photograph.")),
                 FrontendWidget("color_palette", "COLORS", REQUIRED,
                                {"tooltip": PALETTE_TOOLTIP, "default": [], "socketless": False})],
         outputs=[Output("DICT", "prompt")])
def build_json_prompt_ideogram(element: Any, style: Any, high_level_description: str = "", background: str = "",
                               aesthetics: str = "", lighting: str = "", medium: str = "",
                               color_palette: Any = None) -> tuple[dict]:
    """The caption dict (behaviour of ComfyUI's BuildJsonPromptIdeogram.execute)."""
    chosen = style if isinstance(style, dict) else {}
    texts = {name: _text(value, name) for name, value in (
        ("high_level_description", high_level_description), ("background", background),
        ("aesthetics", aesthetics), ("lighting", lighting), ("medium", medium),
        ("style.photo", chosen.get("photo", "")), ("style.art_style", chosen.get("art_style", "")))}
    if color_palette is not None and not isinstance(color_palette, (list, tuple, dict)):
        raise NodeInputError("color_palette", "a list of colour strings", describe(color_palette))
    return (ideogram_caption(element, chosen.get("style", "none"), photo=texts["style.photo"],
                             art_style=texts["style.art_style"],
                             high_level_description=texts["high_level_description"],
                             background=texts["background"], aesthetics=texts["aesthetics"],
                             lighting=texts["lighting"], medium=texts["medium"], color_palette=color_palette),)
