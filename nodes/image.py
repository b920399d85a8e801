"""Image nodes: SaveImage, PreviewImage, LoadImage, LoadImageMask, ImageScale, RebatchImages.

ComfyUI's names, inputs, outputs and semantics (its `nodes.py` and `comfy_extras/nodes_rebatch.py`
at the reference snapshot, 0.3.64; behaviour described in reference/comfyui-contract.md), written
here. IMAGE is a float tensor `[B, H, W, C]` in 0..1, MASK `[B, H, W]`. Thin: the image maths and
file naming live in `comfy_core.image` (pixels, resize, decode, file_names, png).

- Pixels become uint8 by `clip(255 * x)` then truncation (not rounding), as ComfyUI does, so the
  same image gives the same PNG bytes.
- Saved files follow ComfyUI's counter scheme `<prefix>_00001_.png` (comfy_core.image.file_names).
- Where and how a batch is written is a `SaveTarget` (comfy_core.image.png): ComfyUI's
  `SaveImage` instance attributes, which `PreviewImage` and packs' subclasses of
  `nodes.SaveImage` set in `__init__` (the compat layer's facades read them back from the
  instance); `--disable-metadata` (the environment's `disable_metadata`) drops the text chunks.
- File names chosen by the client (`LoadImage`'s `image`, `filename_prefix`) are confined to
  their folder: `..`, absolute paths and symlinks leading out are refused.
"""
from __future__ import annotations

import hashlib
import mimetypes
from pathlib import Path
from typing import TYPE_CHECKING, Any

from comfy_core.image.decode import load_image_frames, load_mask_channel
from comfy_core.image.file_names import confined_file, split_annotation
from comfy_core.image.png import SaveTarget, preview_target, write_image_batch
from comfy_core.image.resize import upscale_samples
from graph.context import current
from graph.native import MAX_RESOLUTION, Combo, Hidden, Input, Int, Output, String, node
import nodes.checks as checks
from nodes.environment import Environment, current_env
from nodes.errors import NodeInputError, describe, image_input_errors

if TYPE_CHECKING:
    import torch

# torch is imported inside comfy_core.image' functions: registering these nodes and rendering
# /object_info must not import torch (server start-up).

UPSCALE_METHODS = ["nearest-exact", "bilinear", "area", "bicubic", "lanczos"]
CROP_METHODS = ["disabled", "center"]
MASK_CHANNELS = ["alpha", "red", "green", "blue"]


def metadata_enabled(env: Any) -> bool:
    """False when the host runs with `--disable-metadata` (the environment's `disable_metadata`)."""
    return not getattr(env, "disable_metadata", False)


def folder_for(env: Environment, folder_type: str) -> Path:
    return {"input": env.input_dir, "output": env.output_dir, "temp": env.temp_dir}[folder_type]


def annotated_path(env: Environment, name: str, *, input_name: str = "image") -> Path:
    """The file meant by an image name as the editor sends it: `"x.png"`, `"sub/x.png"`, or
    `"x.png [output]"` (input folder unless annotated), confined to that folder."""
    if not isinstance(name, str):
        raise NodeInputError(input_name, "a file name (string)", describe(name))
    relative, folder_type = split_annotation(name)
    with image_input_errors():
        return confined_file(folder_for(env, folder_type), relative, input_name=input_name)


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
            raise NodeInputError("images", "images of one size within each output batch",
                                 f"sizes {sorted(list(s) for s in shapes)}")
        out.append(torch.cat(group, dim=0))
    return out


# --- nodes ------------------------------------------------------------------------------------

# Today's ComfyUI (nodes.py, after 0.3.64): SaveImage and PreviewImage pass their images on as an
# IMAGE output named "images", so a graph may go on from a saved or previewed image.
@node("SaveImage", category="image", display_name="Save Image", output_node=True,
      description="Saves the input images to your ComfyUI output directory.",
      search_aliases=("save", "save image", "export image", "output image", "write image", "download"),
      essentials_category="Basics", outputs=[Output("IMAGE", name="images")],
      inputs=[Input("images", "IMAGE", tooltip="The images to save."),
              String("filename_prefix", default="ComfyUI",
                     tooltip="The prefix for the file to save. This may include formatting information such as "
                             "%date:yyyy-MM-dd% or %Empty Latent Image.width% to include values from nodes."),
              Hidden("prompt", "PROMPT"), Hidden("extra_pnginfo", "EXTRA_PNGINFO")])
def save_image(images: torch.Tensor, filename_prefix: str, prompt: Any = None, extra_pnginfo: Any = None) -> dict:
    env = current_env()
    with image_input_errors():
        saved = write_image_batch(images, filename_prefix, SaveTarget(Path(env.output_dir)), prompt=prompt,
                                  extra_pnginfo=extra_pnginfo, metadata=metadata_enabled(env))
    return {**saved, "result": (images,)}


@node("PreviewImage", category="image", display_name="Preview Image", output_node=True,
      description="Preview the images without saving them to the ComfyUI output directory.",
      search_aliases=("preview", "preview image", "show image", "view image", "display image", "image viewer"),
      essentials_category="Basics", outputs=[Output("IMAGE", name="images")],
      inputs=[Input("images", "IMAGE"), Hidden("prompt", "PROMPT"), Hidden("extra_pnginfo", "EXTRA_PNGINFO")])
def preview_image(images: torch.Tensor, prompt: Any = None, extra_pnginfo: Any = None) -> dict:
    env = current_env()
    with image_input_errors():
        shown = write_image_batch(images, "ComfyUI", preview_target(env.temp_dir), prompt=prompt,
                                  extra_pnginfo=extra_pnginfo, metadata=metadata_enabled(env))
    return {**shown, "result": (images,)}


def image_exists(image: str) -> bool | str:
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
    except NodeInputError as exc:
        return str(exc)
    return True if path.is_file() else f"Invalid image file: {image}"


def hash_image(image: str, **_: Any) -> str | float:
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
      is_changed=hash_image, validate_inputs=image_exists)
def load_image(image: str) -> tuple[torch.Tensor, torch.Tensor]:
    return load_image_frames(annotated_path(current_env(), image))


@node("LoadImageMask", category="mask", display_name="Load Image (as Mask)",
      description="Loads one channel of an image from the input folder as a mask.",
      inputs=[Combo("image", list_input_images, image_upload=True), Combo("channel", MASK_CHANNELS)],
      outputs=[Output("MASK")],
      is_changed=hash_image, validate_inputs=image_exists)
def load_image_mask(image: str, channel: str) -> tuple[torch.Tensor]:
    return (load_mask_channel(annotated_path(current_env(), image), channel),)


@node("ImageScale", category="image/upscaling", display_name="Upscale Image",
      description="Resizes images to width x height (0 keeps the aspect ratio from the other side).",
      inputs=[Input("image", "IMAGE"), Combo("upscale_method", UPSCALE_METHODS),
              Int("width", default=512, min=0, max=MAX_RESOLUTION, step=1),
              Int("height", default=512, min=0, max=MAX_RESOLUTION, step=1),
              Combo("crop", CROP_METHODS)],
      outputs=[Output("IMAGE")])
def image_scale(image: torch.Tensor, upscale_method: str, width: int, height: int, crop: str) -> tuple[torch.Tensor]:
    checks.image_batch(image, "image")
    if width == 0 and height == 0:
        return (image,)
    samples = image.movedim(-1, 1)  # [B, C, H, W]
    if width == 0:
        width = max(1, round(samples.shape[3] * height / samples.shape[2]))
    elif height == 0:
        height = max(1, round(samples.shape[2] * width / samples.shape[3]))
    return (upscale_samples(samples, width, height, upscale_method, crop).movedim(1, -1),)


@node("RebatchImages", category="image/batch", display_name="Rebatch Images", input_is_list=True,
      python_module="comfy_extras.nodes_rebatch", description="Regroups all incoming images into batches of batch_size.",
      inputs=[Input("images", "IMAGE"), Int("batch_size", default=1, min=1, max=4096)],
      outputs=[Output("IMAGE", is_list=True)])
def rebatch_images(images: list[torch.Tensor], batch_size: list[int]) -> tuple[list[torch.Tensor]]:
    # INPUT_IS_LIST: every input arrives as a list; the widget's value is its first element.
    for batch in images:
        checks.image_batch(batch)
    return (rebatch(images, batch_size[0]),)
