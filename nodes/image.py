"""Image nodes: SaveImage, PreviewImage, LoadImage, LoadImageMask, ImageScale, RebatchImages.

ComfyUI's names, inputs, outputs and semantics (its `nodes.py` and `comfy_extras/nodes_rebatch.py`
at the reference snapshot, 0.3.64; behaviour described in reference/comfyui-contract.md), written
here. IMAGE is a float tensor `[B, H, W, C]` in 0..1, MASK `[B, H, W]`.

- Pixels become uint8 by `clip(255 * x)` then truncation (not rounding), as ComfyUI does, so the
  same image gives the same PNG bytes.
- Saved files follow ComfyUI's counter scheme `<prefix>_00001_.png`: the next counter is one more
  than the largest found for that prefix in the target folder; the prefix may name subfolders
  (`"portraits/face"`), which must stay inside the output folder.
- Where and how a batch is written is a `SaveTarget` (folder, UI `type`, prefix suffix, PNG
  level): ComfyUI's `SaveImage` instance attributes, which `PreviewImage` and packs' subclasses
  of `nodes.SaveImage` set in `__init__` (nodes/_comfy_facade.py reads them back from the
  instance); `--disable-metadata` (the environment's `disable_metadata`) drops the text chunks.
- File names chosen by the client (`LoadImage`'s `image`, `filename_prefix`) are confined to
  their folder: `..`, absolute paths and symlinks leading out are refused (ComfyUI's
  CVE-2026-56673 came from not doing this for LoadImage).
"""
from __future__ import annotations

import hashlib
import json
import mimetypes
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graph.context import current
from graph.native import MAX_RESOLUTION, Combo, Hidden, Input, Int, Output, String, node
from nodes.environment import Environment, current_env

if TYPE_CHECKING:
    import numpy as np
    import torch
    from PIL.PngImagePlugin import PngInfo

# numpy, torch and Pillow are imported inside the functions that use them: registering these
# nodes and rendering /object_info must not import torch (server start-up).

UPSCALE_METHODS = ["nearest-exact", "bilinear", "area", "bicubic", "lanczos"]
CROP_METHODS = ["disabled", "center"]
MASK_CHANNELS = ["alpha", "red", "green", "blue"]
FOLDER_TYPES = ("input", "output", "temp")
SAVE_COMPRESS_LEVEL = 4  # ComfyUI's SaveImage
PREVIEW_COMPRESS_LEVEL = 1  # ComfyUI's PreviewImage: temp files, favour speed
# ComfyUI's PreviewImage suffix alphabet (it has "p" twice and no "w"; kept for identical names).
_PREVIEW_SUFFIX_LETTERS = "abcdefghijklmnopqrstupvxyz"
# Pillow formats whose extra frames are not an animation (MPO: a stereo pair from cameras).
_SINGLE_FRAME_FORMATS = {"MPO"}


class ImageNodeError(ValueError):
    """Bad input to an image node: names the node, the input, what was expected and received."""

    def __init__(self, node: str, input_name: str, expected: str, received: str) -> None:
        super().__init__(f"{node}: input '{input_name}' expected {expected}, received {received}")
        self.node = node
        self.input_name = input_name


# --- pure helpers -------------------------------------------------------------------------------

def image_to_uint8(image: torch.Tensor) -> np.ndarray:
    """One image `[H, W, C]` in 0..1 to uint8 pixels by `clip(255 * x)` and truncation."""
    import numpy as np
    import torch

    return np.clip(255.0 * image.detach().to("cpu", torch.float32).numpy(), 0, 255).astype(np.uint8)


def check_image_batch(images: Any, node: str, input_name: str = "images") -> torch.Tensor:
    """`images` as an IMAGE batch `[B, H, W, C]` with C in 1, 3, 4 and B, H, W > 0."""
    import torch

    if not isinstance(images, torch.Tensor):
        raise ImageNodeError(node, input_name, "an IMAGE tensor [B, H, W, C]", type(images).__name__)
    if images.ndim != 4 or images.shape[-1] not in (1, 3, 4) or 0 in images.shape:
        raise ImageNodeError(node, input_name, "an IMAGE tensor [B, H, W, C] with C = 1, 3 or 4",
                             f"shape {list(images.shape)}")
    return images


def fill_prefix_variables(prefix: str, width: int, height: int, now: time.struct_time) -> str:
    """ComfyUI's server-side prefix variables: %width%, %height%, %year%, %month%, %day%,
    %hour%, %minute%, %second% (the editor replaces %date:...% and %Node.widget% itself)."""
    values = {
        "width": str(width), "height": str(height), "year": str(now.tm_year),
        "month": f"{now.tm_mon:02}", "day": f"{now.tm_mday:02}", "hour": f"{now.tm_hour:02}",
        "minute": f"{now.tm_min:02}", "second": f"{now.tm_sec:02}",
    }
    for key, value in values.items():
        prefix = prefix.replace(f"%{key}%", value)
    return prefix


def next_counter(folder: Path, filename: str) -> int:
    """One more than the largest `<filename>_<digits>...` counter among the files in `folder`
    (1 when there is none), ComfyUI's `get_save_image_path` rule: the text after
    `<filename>_` up to the next `_` is the counter; names where it is not a number count as 0."""
    best = 0
    key = os.path.normcase(filename)
    for entry in os.listdir(folder):
        head, sep, rest = entry[:len(filename)], entry[len(filename):len(filename) + 1], entry[len(filename) + 1:]
        if sep != "_" or os.path.normcase(head) != key:
            continue
        try:
            number = int(rest.split("_")[0])
        except ValueError:
            number = 0
        best = max(best, number)
    return best + 1


def save_location(root: Path, filename_prefix: str, width: int, height: int, *,
                  node: str = "SaveImage", now: time.struct_time | None = None) -> tuple[Path, str, int, str]:
    """Where a batch goes: `(folder, file name stem, first counter, subfolder)`.

    `filename_prefix` is split as ComfyUI does (`normpath`, then dirname/basename); the folder
    is created; a prefix that would leave `root` raises `ImageNodeError`.
    """
    if "%" in filename_prefix:
        filename_prefix = fill_prefix_variables(filename_prefix, width, height, now or time.localtime())
    if "\x00" in filename_prefix:
        raise ImageNodeError(node, "filename_prefix", "a file name prefix", "a string containing NUL")
    normalized = os.path.normpath(filename_prefix)
    subfolder, filename = os.path.split(normalized)
    base = Path(root).resolve()
    folder = (base / subfolder).resolve() if subfolder else base
    if os.path.isabs(normalized) or not folder.is_relative_to(base):
        raise ImageNodeError(node, "filename_prefix", f"a prefix inside the folder {base}",
                             f"{filename_prefix!r}, which leads outside it")
    folder.mkdir(parents=True, exist_ok=True)
    return folder, filename, next_counter(folder, filename), Path(subfolder).as_posix() if subfolder else ""


def png_metadata(prompt: Any, extra_pnginfo: Any, node: str = "SaveImage") -> PngInfo:
    """ComfyUI's PNG text chunks: `prompt` (the API prompt as JSON) and one chunk per key of
    `extra_pnginfo` (the editor sends `workflow`), each value as JSON."""
    from PIL.PngImagePlugin import PngInfo

    info = PngInfo()
    if prompt is not None:
        info.add_text("prompt", json.dumps(prompt))
    if extra_pnginfo is not None:
        if not isinstance(extra_pnginfo, dict):
            raise ImageNodeError(node, "extra_pnginfo", "an object (extra_data.extra_pnginfo)",
                                 type(extra_pnginfo).__name__)
        for key, value in extra_pnginfo.items():
            info.add_text(key, json.dumps(value))
    return info


def save_images(images: torch.Tensor, root: Path, filename_prefix: str, *, folder_type: str,
                compress_level: int, prompt: Any = None, extra_pnginfo: Any = None,
                node: str = "SaveImage", metadata: bool = True) -> list[dict]:
    """Write each image of the batch as PNG; the UI records `{filename, subfolder, type}`.

    `metadata=False` (the `--disable-metadata` flag) writes no text chunks at all, as ComfyUI's
    SaveImage does under `args.disable_metadata`."""
    from PIL import Image

    check_image_batch(images, node)
    # images: [B, H, W, C]
    folder, filename, counter, subfolder = save_location(
        root, filename_prefix, int(images.shape[2]), int(images.shape[1]), node=node)
    pnginfo = png_metadata(prompt, extra_pnginfo, node) if metadata else None
    results = []
    for batch_number, image in enumerate(images):
        pixels = image_to_uint8(image)  # [H, W, C] uint8
        if pixels.shape[-1] == 1:
            pixels = pixels[..., 0]  # [H, W]: Pillow saves it as 8-bit greyscale
        name = f"{filename.replace('%batch_num%', str(batch_number))}_{counter:05}_.png"
        Image.fromarray(pixels).save(folder / name, pnginfo=pnginfo, compress_level=compress_level)
        results.append({"filename": name, "subfolder": subfolder, "type": folder_type})
        counter += 1
    return results


@dataclass(frozen=True)
class SaveTarget:
    """Where and how SaveImage writes: the four attributes ComfyUI's `SaveImage` keeps on its
    instance (nodes.py) and that `PreviewImage` and packs' subclasses set in `__init__`.

    `output_dir` is the folder the files go to (and that `filename_prefix` may not leave),
    `type` the `type` of each UI record (`"output"`, `"temp"`, ...), `prefix_append` is added to
    the node's `filename_prefix`, `compress_level` is the PNG (zlib) level.
    """

    output_dir: Path
    type: str = "output"
    prefix_append: str = ""
    compress_level: int = SAVE_COMPRESS_LEVEL


def preview_target(env: Environment) -> SaveTarget:
    """PreviewImage's target: the temp folder, type "temp", level 1 and, as ComfyUI's, a random
    `_temp_xxxxx` suffix per instance so concurrent previews never share a counter."""
    suffix = "".join(secrets.choice(_PREVIEW_SUFFIX_LETTERS) for _ in range(5))
    return SaveTarget(Path(env.temp_dir), "temp", f"_temp_{suffix}", PREVIEW_COMPRESS_LEVEL)


def metadata_enabled(env: Any) -> bool:
    """False when the host runs with `--disable-metadata` (the environment's `disable_metadata`)."""
    return not getattr(env, "disable_metadata", False)


def write_image_batch(images: torch.Tensor, filename_prefix: str, target: SaveTarget, *, prompt: Any = None,
                      extra_pnginfo: Any = None, metadata: bool = True, node: str = "SaveImage") -> dict:
    """ComfyUI's `SaveImage.save_images` for one target: the files, and `{"ui": {"images": [...]}}`."""
    results = save_images(images, Path(target.output_dir), filename_prefix + target.prefix_append,
                          folder_type=target.type, compress_level=target.compress_level, prompt=prompt,
                          extra_pnginfo=extra_pnginfo, node=node, metadata=metadata)
    return {"ui": {"images": results}}


def folder_for(env: Environment, folder_type: str) -> Path:
    return {"input": env.input_dir, "output": env.output_dir, "temp": env.temp_dir}[folder_type]


def confined_file(root: Path, relative: str, *, node: str, input_name: str) -> Path:
    """`root / relative` resolved through symlinks, refused (ImageNodeError) when `relative`
    is absolute, contains `..`, a backslash or NUL, or resolves outside `root`."""
    parts = relative.split("/")
    if (not relative or "\x00" in relative or "\\" in relative or os.path.isabs(relative)
            or any(part in ("", ".", "..") for part in parts)):
        raise ImageNodeError(node, input_name, "a file name inside its folder (no '..', no absolute path)",
                             repr(relative))
    base = Path(root).resolve()
    path = base.joinpath(*parts).resolve()
    if not path.is_relative_to(base) or path == base:
        raise ImageNodeError(node, input_name, f"a file inside {base}", f"{relative!r}, which resolves outside it")
    return path


def split_annotation(name: str, default_type: str = "input") -> tuple[str, str]:
    """`"x.png [output]"` -> `("x.png", "output")` (ComfyUI's annotated file names); a name
    without a known annotation keeps `default_type`."""
    for folder_type in FOLDER_TYPES:
        suffix = f" [{folder_type}]"
        if name.endswith(suffix):
            return name[: -len(suffix)], folder_type
    return name, default_type


def annotated_path(env: Environment, name: str, *, node: str = "LoadImage", input_name: str = "image") -> Path:
    """The file meant by an image name as the editor sends it: `"x.png"`, `"sub/x.png"`, or
    `"x.png [output]"` (input folder unless annotated), confined to that folder."""
    if not isinstance(name, str):
        raise ImageNodeError(node, input_name, "a file name (string)", type(name).__name__)
    relative, folder_type = split_annotation(name)
    return confined_file(folder_for(env, folder_type), relative, node=node, input_name=input_name)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def list_input_images(env: Environment | None) -> list[str]:
    """The image files directly in the input folder, sorted (LoadImage's combo, as ComfyUI)."""
    env = env if isinstance(env, Environment) else current_env()
    folder = env.input_dir
    if not folder.is_dir():
        return []
    names = [p.name for p in folder.iterdir()
             if p.is_file() and (mimetypes.guess_type(p.name)[0] or "").startswith("image/")]
    return sorted(names)


def load_image_frames(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """An image file as `(IMAGE [B, H, W, 3], MASK [B, H, W])`, ComfyUI's LoadImage rules:

    every frame of an animation (not of an MPO stereo pair) becomes one batch entry; frames of
    another size than the first are skipped; EXIF orientation is applied; 32-bit integer
    ('I') images are scaled by 1/255; the mask is `1 - alpha` (from the alpha band, or from a
    palette's transparency), and a `[1, 64, 64]` zero mask per frame when there is no alpha.
    """
    import numpy as np
    import torch
    from PIL import Image, ImageOps, ImageSequence

    with Image.open(path) as img:
        images, masks = [], []
        size = None
        for frame in ImageSequence.Iterator(img):
            frame = ImageOps.exif_transpose(frame)
            if frame.mode == "I":
                frame = frame.point(lambda v: v * (1 / 255))
            rgb = frame.convert("RGB")
            if size is None:
                size = rgb.size
            if rgb.size != size:
                continue
            images.append(torch.from_numpy(np.array(rgb).astype(np.float32) / 255.0)[None])  # [1, H, W, 3]
            if "A" in frame.getbands():
                alpha = np.array(frame.getchannel("A")).astype(np.float32) / 255.0
                masks.append((1.0 - torch.from_numpy(alpha))[None])  # [1, H, W]
            elif frame.mode == "P" and "transparency" in frame.info:
                alpha = np.array(frame.convert("RGBA").getchannel("A")).astype(np.float32) / 255.0
                masks.append((1.0 - torch.from_numpy(alpha))[None])
            else:
                masks.append(torch.zeros((1, 64, 64), dtype=torch.float32))
        if len(images) > 1 and img.format not in _SINGLE_FRAME_FORMATS:
            return torch.cat(images, dim=0), torch.cat(masks, dim=0)
        return images[0], masks[0]


def load_mask_channel(path: Path, channel: str) -> torch.Tensor:
    """One channel of the first frame as MASK `[1, H, W]` (ComfyUI's LoadImageMask): the image
    is converted to RGBA first; for alpha the mask is `1 - alpha`."""
    import numpy as np
    import torch
    from PIL import Image, ImageOps

    band = channel[0].upper()
    with Image.open(path) as img:
        frame = ImageOps.exif_transpose(img)
        if frame.getbands() != ("R", "G", "B", "A"):
            if frame.mode == "I":
                frame = frame.point(lambda v: v * (1 / 255))
            frame = frame.convert("RGBA")
        mask = torch.from_numpy(np.array(frame.getchannel(band)).astype(np.float32) / 255.0)  # [H, W]
    if band == "A":
        mask = 1.0 - mask
    return mask[None]


def _lanczos(samples: torch.Tensor, width: int, height: int) -> torch.Tensor:
    """Lanczos resampling through Pillow on uint8 pixels, as ComfyUI does (`comfy.utils.lanczos`)."""
    import numpy as np
    import torch
    from PIL import Image

    # samples: [B, C, H, W]
    out = []
    for image in samples:
        pixels = image_to_uint8(image.movedim(0, -1))  # [H, W, C]
        squeeze = pixels.shape[-1] == 1
        resized = Image.fromarray(pixels[..., 0] if squeeze else pixels).resize(
            (width, height), resample=Image.Resampling.LANCZOS)
        array = np.array(resized).astype(np.float32) / 255.0
        out.append(torch.from_numpy(array[..., None] if squeeze else array).movedim(-1, 0))
    return torch.stack(out).to(samples.device, samples.dtype)  # [B, C, height, width]


def center_crop(samples: "torch.Tensor", width: int, height: int) -> "torch.Tensor":
    """The centred region of `[..., H, W]` with the aspect ratio of width x height (ComfyUI's
    `common_upscale` crop)."""
    old_h, old_w = samples.shape[-2], samples.shape[-1]
    old_aspect, new_aspect = old_w / old_h, width / height
    x = y = 0
    if old_aspect > new_aspect:
        x = round((old_w - old_w * (new_aspect / old_aspect)) / 2)
    elif old_aspect < new_aspect:
        y = round((old_h - old_h * (old_aspect / new_aspect)) / 2)
    return samples.narrow(-2, y, old_h - y * 2).narrow(-1, x, old_w - x * 2)


def upscale_samples(samples: torch.Tensor, width: int, height: int, method: str, crop: str) -> torch.Tensor:
    """Resize `[B, C, H, W]` to `[B, C, height, width]` (ComfyUI's `comfy.utils.common_upscale`
    for these methods): with crop "center", first cut the centred region with the target's
    aspect ratio; then interpolate with `method` (torch's modes, or Pillow's Lanczos)."""
    import torch

    if crop == "center":
        samples = center_crop(samples, width, height)
    if method == "lanczos":
        return _lanczos(samples, width, height)
    return torch.nn.functional.interpolate(samples, size=(height, width), mode=method)


def rebatch(images: list[torch.Tensor], batch_size: int) -> list[torch.Tensor]:
    """All images of all input batches, regrouped into batches of `batch_size` (the last may be
    smaller); ComfyUI's ImageRebatch. Images of different sizes cannot share a batch."""
    import torch

    singles = [batch[i:i + 1] for batch in images for i in range(batch.shape[0])]  # each [1, H, W, C]
    out = []
    for start in range(0, len(singles), batch_size):
        group = singles[start:start + batch_size]
        shapes = {tuple(t.shape[1:]) for t in group}
        if len(shapes) > 1:
            raise ImageNodeError("RebatchImages", "images", "images of one size within each output batch",
                                 f"sizes {sorted(list(s) for s in shapes)}")
        out.append(torch.cat(group, dim=0))
    return out


# --- nodes ------------------------------------------------------------------------------------

@node("SaveImage", category="image", display_name="Save Image", output_node=True,
      description="Saves the images as PNG files in the output folder, with the workflow embedded.",
      inputs=[Input("images", "IMAGE", tooltip="The images to save."),
              String("filename_prefix", default="ComfyUI",
                     tooltip="The file name prefix; may name subfolders, e.g. 'portraits/face'."),
              Hidden("prompt", "PROMPT"), Hidden("extra_pnginfo", "EXTRA_PNGINFO")])
def save_image(images: torch.Tensor, filename_prefix: str, prompt: Any = None, extra_pnginfo: Any = None) -> dict:
    env = current_env()
    return write_image_batch(images, filename_prefix, SaveTarget(Path(env.output_dir)), prompt=prompt,
                             extra_pnginfo=extra_pnginfo, metadata=metadata_enabled(env))


@node("PreviewImage", category="image", display_name="Preview Image", output_node=True,
      description="Shows the images in the editor; they are written to the temp folder only.",
      inputs=[Input("images", "IMAGE"), Hidden("prompt", "PROMPT"), Hidden("extra_pnginfo", "EXTRA_PNGINFO")])
def preview_image(images: torch.Tensor, prompt: Any = None, extra_pnginfo: Any = None) -> dict:
    env = current_env()
    return write_image_batch(images, "ComfyUI", preview_target(env), prompt=prompt, extra_pnginfo=extra_pnginfo,
                             metadata=metadata_enabled(env), node="PreviewImage")


def _image_exists(image: str) -> bool | str:
    """VALIDATE_INPUTS of the loaders: the named file must exist inside its folder. Naming
    `image` here replaces the combo-list check (ComfyUI's rule), so uploads into subfolders
    and `[output]`-annotated names are accepted.

    The folders come from the running context's environment. Where the validator provides
    no context, the folders are unknown here, so the check is left to the run, where the
    loader raises the same error; guessing a folder would reject valid prompts."""
    ctx = current()
    if ctx is None or not isinstance(ctx.env, Environment):
        return True
    try:
        path = annotated_path(ctx.env, image)
    except ImageNodeError as exc:
        return str(exc)
    return True if path.is_file() else f"Invalid image file: {image}"


def _hash_image(image: str, **_: Any) -> str | float:
    """IS_CHANGED of the loaders: the file's SHA-256, so editing the file re-runs the node.

    Without a running context the host's folders are unknown and the file cannot be hashed:
    NaN, which never equals itself, makes the node run every time (ComfyUI's convention)."""
    ctx = current()
    if ctx is None or not isinstance(ctx.env, Environment):
        return float("nan")
    return file_sha256(annotated_path(ctx.env, image))


@node("LoadImage", category="image", display_name="Load Image",
      description="Loads an image from the input folder; the mask is 1 - alpha.",
      inputs=[Combo("image", list_input_images, image_upload=True)],
      outputs=[Output("IMAGE"), Output("MASK")],
      is_changed=_hash_image, validate_inputs=_image_exists)
def load_image(image: str) -> tuple[torch.Tensor, torch.Tensor]:
    return load_image_frames(annotated_path(current_env(), image))


@node("LoadImageMask", category="mask", display_name="Load Image (as Mask)",
      description="Loads one channel of an image from the input folder as a mask.",
      inputs=[Combo("image", list_input_images, image_upload=True), Combo("channel", MASK_CHANNELS)],
      outputs=[Output("MASK")],
      is_changed=_hash_image, validate_inputs=_image_exists)
def load_image_mask(image: str, channel: str) -> tuple[torch.Tensor]:
    return (load_mask_channel(annotated_path(current_env(), image, node="LoadImageMask"), channel),)


@node("ImageScale", category="image/upscaling", display_name="Upscale Image",
      description="Resizes images to width x height (0 keeps the aspect ratio from the other side).",
      inputs=[Input("image", "IMAGE"), Combo("upscale_method", UPSCALE_METHODS),
              Int("width", default=512, min=0, max=MAX_RESOLUTION, step=1),
              Int("height", default=512, min=0, max=MAX_RESOLUTION, step=1),
              Combo("crop", CROP_METHODS)],
      outputs=[Output("IMAGE")])
def image_scale(image: torch.Tensor, upscale_method: str, width: int, height: int, crop: str) -> tuple[torch.Tensor]:
    check_image_batch(image, "ImageScale", "image")
    if width == 0 and height == 0:
        return (image,)
    samples = image.movedim(-1, 1)  # [B, C, H, W]
    if width == 0:
        width = max(1, round(samples.shape[3] * height / samples.shape[2]))
    elif height == 0:
        height = max(1, round(samples.shape[2] * width / samples.shape[3]))
    return (upscale_samples(samples, width, height, upscale_method, crop).movedim(1, -1),)


@node("RebatchImages", category="image/batch", display_name="Rebatch Images", input_is_list=True,
      description="Regroups all incoming images into batches of batch_size.",
      inputs=[Input("images", "IMAGE"), Int("batch_size", default=1, min=1, max=4096)],
      outputs=[Output("IMAGE", is_list=True)])
def rebatch_images(images: list[torch.Tensor], batch_size: list[int]) -> tuple[list[torch.Tensor]]:
    # INPUT_IS_LIST: every input arrives as a list; the widget's value is its first element.
    for batch in images:
        check_image_batch(batch, "RebatchImages")
    return (rebatch(images, batch_size[0]),)
