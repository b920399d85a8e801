"""Save nodes for other file formats, from ComfyUI's comfy_extras/nodes_images.py (0.3.64):
SaveAnimatedWEBP, SaveAnimatedPNG (APNG) and SaveSVGNode, plus the SVG value they save.

Like SaveImage, each writes into the output folder with ComfyUI's file naming and counter
(`comfy_core.image.file_names.save_location`: `<prefix>_00001_.webp`, subfolders in the prefix,
never outside the folder) and returns ComfyUI's UI record `{"images": [{filename, subfolder,
type}], "animated": (bool,)}`. The prompt and workflow go into each file as ComfyUI writes them,
unless the host runs with `--disable-metadata` (the environment's `disable_metadata`):

- WEBP: EXIF, tag 0x0110 (Model) = `prompt:<json>`, then one tag per `extra_pnginfo` key counting
  down from 0x010F (Make): `<key>:<json>`;
- APNG: private `comf` chunks after the image data, `<key>\\0<json>` in Latin-1;
- SVG: a `<metadata>` element with a CDATA block of indented JSON after each `<svg ...>` tag
  (ComfyUI writes it even under --disable-metadata; it is honoured here).

Today's ComfyUI's SaveAnimatedWEBP / SaveAnimatedPNG / SaveSVGNode (V3) also pass their input on (an
IMAGE output, an SVG one).
"""
from __future__ import annotations

import json
import re
from io import BytesIO
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graph import v3_schema as v3
import nodes.checks as checks
from nodes.environment import current_env
from nodes.errors import NodeInputError, describe, image_input_errors

if TYPE_CHECKING:
    import torch
    from PIL import Image
    from PIL.PngImagePlugin import PngInfo

# torch and Pillow are imported inside the functions that run: registering these nodes and
# rendering /object_info must not import them (server start-up).

MODULE = "comfy_extras.nodes_images"
# SaveAnimatedWEBP's `method` choices: libwebp's effort level (0 fast .. 6 small).
WEBP_METHODS = {"default": 4, "fastest": 0, "slowest": 6}
EXIF_PROMPT_TAG = 0x0110  # Model
EXIF_FIRST_EXTRA_TAG = 0x010F  # Make; later keys count down from here
APNG_CHUNK = b"comf"
_SVG_OPEN_TAG = re.compile(r"(<svg[^>]*>)", flags=re.UNICODE)
# ComfyUI's metadata element, whitespace included, so the files come out byte for byte the same.
_SVG_METADATA = ("  <metadata>\n                <![CDATA[\n            {json}\n                ]]>\n"
                 "            </metadata>\n            ")


class SVG:
    """ComfyUI's SVG value (comfy_extras.nodes_images.SVG): a list of SVG documents, each a
    binary stream (`BytesIO`) holding UTF-8 text."""

    def __init__(self, data: list[BytesIO]) -> None:
        self.data = data

    def combine(self, other: "SVG") -> "SVG":
        return SVG(self.data + other.data)

    @staticmethod
    def combine_all(svgs: list["SVG"]) -> "SVG":
        return SVG([document for svg in svgs for document in svg.data])


def _extra_items(extra_pnginfo: Any) -> list[tuple[str, Any]]:
    if extra_pnginfo is None:
        return []
    if not isinstance(extra_pnginfo, dict):
        raise NodeInputError("extra_pnginfo", "an object (extra_data.extra_pnginfo)", describe(extra_pnginfo))
    return list(extra_pnginfo.items())


def webp_exif(prompt: Any, extra_pnginfo: Any, metadata: bool = True) -> Image.Exif:
    """The EXIF block SaveAnimatedWEBP writes (empty without metadata, as ComfyUI still passes one)."""
    from PIL import Image

    exif = Image.Exif()
    if metadata:
        if prompt is not None:
            exif[EXIF_PROMPT_TAG] = f"prompt:{json.dumps(prompt)}"
        for offset, (key, value) in enumerate(_extra_items(extra_pnginfo)):
            exif[EXIF_FIRST_EXTRA_TAG - offset] = f"{key}:{json.dumps(value)}"
    return exif


def apng_info(prompt: Any, extra_pnginfo: Any) -> PngInfo:
    """The `comf` chunks SaveAnimatedPNG writes after the image data."""
    from PIL.PngImagePlugin import PngInfo

    info = PngInfo()
    entries = ([("prompt", prompt)] if prompt is not None else []) + _extra_items(extra_pnginfo)
    for key, value in entries:
        info.add(APNG_CHUNK, key.encode("latin-1") + b"\0" + json.dumps(value).encode("latin-1"),
                 after_idat=True)
    return info


def svg_with_metadata(text: str, prompt: Any, extra_pnginfo: Any) -> str:
    """`text` with ComfyUI's metadata element after every `<svg ...>` opening tag (unchanged when
    there is neither prompt nor extra_pnginfo)."""
    values: dict[str, Any] = {} if prompt is None else {"prompt": prompt}
    values.update(_extra_items(extra_pnginfo))
    if not values:
        return text
    element = _SVG_METADATA.replace("{json}", json.dumps(values, indent=2))
    return _SVG_OPEN_TAG.sub(lambda match: match.group(1) + "\n" + element, text)


def _frames(images: torch.Tensor) -> list[Image.Image]:
    """The batch as Pillow images, pixels by `clip(255 x)` truncation (greyscale for 1 channel)."""
    from PIL import Image

    from comfy_core.image.pixels import image_to_uint8

    frames = []
    for image in images:
        pixels = image_to_uint8(image)  # [H, W, C]
        frames.append(Image.fromarray(pixels[..., 0] if pixels.shape[-1] == 1 else pixels))
    return frames


def _frame_duration(fps: Any) -> int:
    """Milliseconds per frame, truncated (ComfyUI's int(1000 / fps))."""
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not fps > 0:
        raise NodeInputError("fps", "a FLOAT > 0", repr(fps))
    return int(1000.0 / fps)


def _location(images: torch.Tensor, filename_prefix: Any) -> tuple[Path, str, int, str]:
    from comfy_core.image.file_names import save_location

    if not isinstance(filename_prefix, str):
        raise NodeInputError("filename_prefix", "a STRING", describe(filename_prefix))
    # %width% / %height% are the first image's, as ComfyUI.
    with image_input_errors():
        return save_location(Path(current_env().output_dir), filename_prefix, int(images.shape[2]),
                             int(images.shape[1]))


# Today's ComfyUI (comfy_extras/nodes_images.py, V3): both animated savers sit in "image", are named
# "Save Animated WEBP / PNG" and pass their images on as an IMAGE output "images".
@v3.v3_node("SaveAnimatedWEBP", display_name="Save Animated WEBP", category="image", output_node=True,
            python_module=MODULE, outputs=[v3.Output("IMAGE", "images")],
            inputs=[v3.Socket("images", "IMAGE"), v3.String("filename_prefix", default="ComfyUI"),
                    v3.Float("fps", default=6.0, min=0.01, max=1000.0, step=0.01),
                    v3.Boolean("lossless", default=True), v3.Int("quality", default=80, min=0, max=100),
                    v3.Combo("method", list(WEBP_METHODS))])
def save_animated_webp(images: torch.Tensor, filename_prefix: str, fps: float, lossless: bool, quality: int,
                       method: str, num_frames: int = 0, prompt: Any = None, extra_pnginfo: Any = None) -> dict:
    """The batch as one animated WEBP, a frame per image at `fps`; one image is a still WEBP
    (reported with `animated: false`).

    `num_frames` is today's execute parameter (comfy_extras/nodes_images.py@015e6046: `num_frames=0`,
    its input commented out of the schema): an int >= 0, accepted and, as there, not passed to the
    saving helper (`ImageSaveHelper.get_save_animated_webp_ui`), so the whole batch is still one file.
    (ComfyUI 0.3.64's V1 node cut the animation into files of `num_frames` frames; today's does not.)"""
    if isinstance(num_frames, bool) or not isinstance(num_frames, int) or num_frames < 0:
        raise NodeInputError("num_frames", "an int >= 0", repr(num_frames))
    images = checks.image_batch(images)
    duration = _frame_duration(fps)
    effort = WEBP_METHODS[checks.choice(method, list(WEBP_METHODS), "method")]
    if isinstance(quality, bool) or not isinstance(quality, int) or not 0 <= quality <= 100:
        raise NodeInputError("quality", "an int in 0..100", repr(quality))
    exif = webp_exif(prompt, extra_pnginfo, metadata=not current_env().disable_metadata)
    folder, filename, counter, subfolder = _location(images, filename_prefix)
    frames = _frames(images)
    name = f"{filename}_{counter:05}_.webp"
    frames[0].save(folder / name, save_all=True, duration=duration, append_images=frames[1:], exif=exif,
                   lossless=bool(lossless), quality=quality, method=effort)
    return {"ui": {"images": [{"filename": name, "subfolder": subfolder, "type": "output"}],
                   "animated": (len(frames) != 1,)}, "result": (images,)}


@v3.v3_node("SaveAnimatedPNG", display_name="Save Animated PNG", category="image", output_node=True,
            python_module=MODULE, outputs=[v3.Output("IMAGE", "images")],
            inputs=[v3.Socket("images", "IMAGE"), v3.String("filename_prefix", default="ComfyUI"),
                    v3.Float("fps", default=6.0, min=0.01, max=1000.0, step=0.01),
                    v3.Int("compress_level", default=4, min=0, max=9, advanced=True)])
def save_animated_png(images: torch.Tensor, filename_prefix: str, fps: float, compress_level: int,
                      prompt: Any = None, extra_pnginfo: Any = None) -> dict:
    """The batch as one animated PNG (APNG), a frame per image at `fps`, zlib level compress_level."""
    images = checks.image_batch(images)
    duration = _frame_duration(fps)
    if isinstance(compress_level, bool) or not isinstance(compress_level, int) or not 0 <= compress_level <= 9:
        raise NodeInputError("compress_level", "an int in 0..9", repr(compress_level))
    info = None if current_env().disable_metadata else apng_info(prompt, extra_pnginfo)
    folder, filename, counter, subfolder = _location(images, filename_prefix)
    frames = _frames(images)
    name = f"{filename}_{counter:05}_.png"
    frames[0].save(folder / name, pnginfo=info, compress_level=compress_level, save_all=True, duration=duration,
                   append_images=frames[1:])
    return {"ui": {"images": [{"filename": name, "subfolder": subfolder, "type": "output"}], "animated": (True,)},
            "result": (images,)}


def _svg_text(document: Any, index: int) -> str:
    if isinstance(document, str):
        return document
    raw = document.getvalue() if hasattr(document, "getvalue") else document
    if not isinstance(raw, (bytes, bytearray)):
        raise NodeInputError("svg", "SVG documents as BytesIO, bytes or str", f"item {index}: {describe(document)}")
    return bytes(raw).decode("utf-8")


# Today's SaveSVGNode (V3): "Save SVG" in "image", passing its SVG on as an output "svg".
@v3.v3_node("SaveSVGNode", display_name="Save SVG", category="image", output_node=True, python_module=MODULE,
            description="Save SVG files on disk.", search_aliases=["export vector", "save vector graphics"],
            outputs=[v3.Output("SVG", "svg")],
            inputs=[v3.Socket("svg", "SVG"),
                    v3.String("filename_prefix", default="svg/ComfyUI",
                              tooltip="The prefix for the file to save. This may include formatting information "
                                      "such as %date:yyyy-MM-dd% or %Empty Latent Image.width% to include values "
                                      "from nodes.")])
def save_svg(svg: SVG, filename_prefix: str = "svg/ComfyUI", prompt: Any = None, extra_pnginfo: Any = None) -> dict:
    """Each document of `svg` as `<prefix>_<counter>_.svg` (`%batch_num%` in the prefix becomes
    its index), with the prompt and workflow in a `<metadata>` element."""
    from comfy_core.image.file_names import save_location

    documents = getattr(svg, "data", None)
    if not isinstance(documents, list):
        raise NodeInputError("svg", "an SVG (a list of documents in .data)", describe(svg))
    if not isinstance(filename_prefix, str):
        raise NodeInputError("filename_prefix", "a STRING", describe(filename_prefix))
    texts = [_svg_text(document, index) for index, document in enumerate(documents)]
    metadata = not current_env().disable_metadata
    # No image size: %width% and %height% become 0, as in ComfyUI.
    with image_input_errors():
        folder, filename, counter, subfolder = save_location(Path(current_env().output_dir), filename_prefix, 0, 0)
    results = []
    for batch_number, text in enumerate(texts):
        name = f"{filename.replace('%batch_num%', str(batch_number))}_{counter:05}_.svg"
        if metadata:
            text = svg_with_metadata(text, prompt, extra_pnginfo)
        (folder / name).write_bytes(text.encode("utf-8"))
        results.append({"filename": name, "subfolder": subfolder, "type": "output"})
        counter += 1
    return {"ui": {"images": results}, "result": (svg,)}
