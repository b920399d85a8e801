"""SaveImageAdvanced ("Save Image (Advanced)") of ComfyUI's comfy_extras/nodes_images.py (2026),
declared as ComfyUI's V3 schema renders it (graph/v3_schema.py); behaviour read from that file,
written here.

What it adds over SaveImage (nodes/image.py): a `format` dynamic combo whose choice brings its
own options:

* `png`: 8- or 16-bit per channel (`bit_depth`); `input_color_space` is sRGB only.
* `exr`: 32-bit float, written scene-linear: the input is taken as sRGB (inverse sRGB EOTF), HDR
  (HLG Rec.2020, inverse HLG OETF) or already linear; the gamut's `chromaticities` are stored.
* `avif`: SVT-AV1, 8- or 10-bit YUV 4:2:0 ("auto": 10-bit for HDR), colour tagged sRGB, HDR
  (BT.2020 HLG) or HDR PQ, `crf` quality; a nested `save_mode` combo: one still per image, or
  the batch as one animated AVIF (`fps`, `loop_count`).

File naming uses SaveImage's folder, prefix tokens and counter (comfy_core.image.file_names), but
names are `<prefix>_<counter:05>.<ext>` (no trailing underscore, as ComfyUI's node writes them),
and the counter also counts those names (`next_plain_counter`), where ComfyUI's rule does not and
overwrites the previous file: a deliberate difference.
Metadata (the prompt and the editor's workflow) goes into PNG text chunks and EXR header
attributes unless the host runs with `--disable-metadata`; AVIF files are written without it here
(ComfyUI adds an Exif item to the AVIF's boxes; not done yet). The node returns its images
unchanged as an IMAGE output and `ui.images` records for the editor.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from comfy_core.image.file_names import save_location
from comfy_core.image.pixels import check_image_batch
from graph.v3_schema import Combo, ComboOption, DynamicCombo, Float, Int, Output, Socket, String, v3_node
from nodes import _image_formats as formats
from nodes.environment import current_env
from nodes.errors import NodeInputError, image_input_errors
from nodes.image import metadata_enabled

MODULE = "comfy_extras.nodes_images"

_EXR_SPACE_TOOLTIP = (
    "Colorspace of the input tensor. The EXR is always written as scene-linear in the matching gamut.\n"
    "sRGB \u2014 input is sRGB-encoded Rec.709; the inverse sRGB EOTF is applied.\n"
    "HDR \u2014 input is HLG-encoded Rec.2020 (BT.2100); the inverse HLG OETF is applied to get scene-linear light.\n"
    "linear \u2014 input is already scene-linear (Rec.709 primaries); written through unchanged. Use this for "
    "renderer/compositor output.")

SAVE_MODE = DynamicCombo("save_mode", display_name="save mode", options=(
    ComboOption("still images"),
    ComboOption("animated", (
        Float("fps", default=6.0, min=0.01, max=1000.0, step=0.01),
        Int("loop_count", default=0, min=0, max=1000, advanced=True,
            tooltip="Number of times to loop the animation. 0 loops forever."))),
))

FORMAT = DynamicCombo("format", tooltip="The file format in which to save the image.", options=(
    ComboOption("png", (
        Combo("bit_depth", list(formats.PNG_DEPTHS), default="8-bit", advanced=True),
        Combo("input_color_space", ["sRGB"], default="sRGB", advanced=True))),
    ComboOption("exr", (
        Combo("bit_depth", list(formats.EXR_DEPTHS), default="32-bit float", advanced=True),
        Combo("input_color_space", ["sRGB", "HDR", "linear"], default="sRGB", advanced=True,
              tooltip=_EXR_SPACE_TOOLTIP))),
    ComboOption("avif", (
        Combo("bit_depth", list(formats.AVIF_DEPTHS), default="auto", advanced=True,
              tooltip="Auto uses 8-bit YUV420 for sRGB and 10-bit YUV420 for HDR."),
        Combo("input_color_space", ["sRGB", "HDR", "HDR PQ"], default="sRGB", advanced=True,
              tooltip="Colorspace of the input images. HDR selects BT.2020/HLG and HDR PQ selects BT.2020/PQ."),
        Int("crf", default=18, min=1, max=63, advanced=True,
            tooltip="Lower values produce higher quality and larger files."),
        SAVE_MODE)),
))

_CHOICES = {"png": {"bit_depth": formats.PNG_DEPTHS, "input_color_space": ("sRGB",)},
            "exr": {"bit_depth": formats.EXR_DEPTHS, "input_color_space": ("sRGB", "HDR", "linear")},
            "avif": {"bit_depth": formats.AVIF_DEPTHS, "input_color_space": ("sRGB", "HDR", "HDR PQ")}}


def next_plain_counter(folder: Path, filename: str) -> int:
    """One more than the largest counter of this node's own names, `<filename>_<digits>.<ext>`.

    SaveImage's counter rule (comfy_core.image.file_names.next_counter, ComfyUI's) reads the
    counter up to the next `_`, so it sees these names, which have none after the digits, as 0:
    ComfyUI's node then writes `_00001` again and overwrites the last file. Counting them here
    keeps every earlier file."""
    pattern = re.compile(re.escape(filename) + r"_(\d+)\.[A-Za-z0-9]+", re.IGNORECASE)
    numbers = [int(m.group(1)) for m in map(pattern.fullmatch, os.listdir(folder)) if m]
    return max(numbers, default=0) + 1


def _checked(format: dict[str, Any]) -> tuple[str, str, str]:  # noqa: A002
    kind = format["format"]
    depth = format.get("bit_depth")
    space = format.get("input_color_space", "sRGB")
    for name, value in (("bit_depth", depth), ("input_color_space", space)):
        if value not in _CHOICES[kind][name]:
            raise NodeInputError(f"format.{name}", f"one of {list(_CHOICES[kind][name])} for {kind}", repr(value))
    return kind, depth, space


@v3_node("SaveImageAdvanced", display_name="Save Image (Advanced)", category="image", python_module=MODULE,
         description="Saves the input images to your ComfyUI output directory.", essentials_category="Basics",
         search_aliases=["save", "save image", "export image", "output image", "write image"],
         output_node=True,
         inputs=[Socket("images", "IMAGE", tooltip="The images to save."),
                 String("filename_prefix", default="ComfyUI",
                        tooltip="The prefix for the file to save. May include formatting tokens such as "
                                "%date:yyyy-MM-dd% or %Empty Latent Image.width%."),
                 FORMAT],
         outputs=[Output("IMAGE", "images")])
def save_image_advanced(images: Any, filename_prefix: str, format: dict[str, Any],  # noqa: A002
                        prompt: Any = None, extra_pnginfo: Any = None) -> dict:
    """Write each image (or, animated AVIF, the batch) in the chosen format; pass the images on."""
    kind, depth, space = _checked(format)
    env = current_env()
    with image_input_errors():
        check_image_batch(images)
        folder, filename, counter, subfolder = save_location(
            Path(env.output_dir), filename_prefix, int(images.shape[2]), int(images.shape[1]))
    counter = max(counter, next_plain_counter(folder, filename))
    with_metadata = metadata_enabled(env)
    results: list[dict] = []
    ui: dict[str, Any] = {}
    try:
        if kind == "avif":
            save_mode = format["save_mode"]
            animated = save_mode["save_mode"] == "animated"
            for batch_number, batch in enumerate([images] if animated else images.unsqueeze(1)):
                name = f"{filename.replace('%batch_num%', str(batch_number))}_{counter:05}.avif"
                formats.write_avif(batch, str(folder / name), depth, space, int(format["crf"]),
                                   fps=float(save_mode.get("fps", 1.0)),
                                   loop_count=save_mode.get("loop_count") if animated else None)
                results.append({"filename": name, "subfolder": subfolder, "type": "output"})
                counter += 1
            if animated and len(images) > 1:
                ui["animated"] = [True]
        else:
            for batch_number, image in enumerate(images):
                data = formats.encode_still(image, kind, depth, space)
                if with_metadata and kind == "png":
                    data = formats.png_with_text(data, prompt, extra_pnginfo)
                elif with_metadata:
                    data = formats.exr_with_metadata(data, prompt, extra_pnginfo, space)
                name = f"{filename.replace('%batch_num%', str(batch_number))}_{counter:05}.{kind}"
                (folder / name).write_bytes(data)
                results.append({"filename": name, "subfolder": subfolder, "type": "output"})
                counter += 1
    except formats.EncodeError as exc:
        raise NodeInputError("images", str(exc), f"IMAGE {list(images.shape)}") from exc
    return {"result": (images,), "ui": {"images": results, **ui}}
