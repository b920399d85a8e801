"""Writing IMAGE batches as PNG files, as ComfyUI's `SaveImage.save_images` does (nodes.py):
ComfyUI's text chunks (`prompt`, and one per key of `extra_pnginfo`), the file naming of
`comfy_core.image.file_names`, and the UI records `{filename, subfolder, type}`.

Where and how a batch is written is a `SaveTarget` (folder, UI `type`, prefix suffix, PNG
level): the instance attributes of ComfyUI's `SaveImage`, which `PreviewImage` and packs'
subclasses set in `__init__`.
"""
from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from comfy_core.image.errors import ImageInputError
from comfy_core.image.file_names import save_location
from comfy_core.image.pixels import check_image_batch, image_to_uint8

if TYPE_CHECKING:
    import torch
    from PIL.PngImagePlugin import PngInfo

SAVE_COMPRESS_LEVEL = 4  # ComfyUI's SaveImage
PREVIEW_COMPRESS_LEVEL = 1  # ComfyUI's PreviewImage: temp files, favour speed
# ComfyUI's PreviewImage suffix alphabet (it has "p" twice and no "w"; kept for identical names).
_PREVIEW_SUFFIX_LETTERS = "abcdefghijklmnopqrstupvxyz"


def png_metadata(prompt: Any, extra_pnginfo: Any) -> PngInfo:
    """ComfyUI's PNG text chunks: `prompt` (the API prompt as JSON) and one chunk per key of
    `extra_pnginfo` (the editor sends `workflow`), each value as JSON."""
    from PIL.PngImagePlugin import PngInfo

    info = PngInfo()
    if prompt is not None:
        info.add_text("prompt", json.dumps(prompt))
    if extra_pnginfo is not None:
        if not isinstance(extra_pnginfo, dict):
            raise ImageInputError("extra_pnginfo", "an object (extra_data.extra_pnginfo)",
                                  type(extra_pnginfo).__name__)
        for key, value in extra_pnginfo.items():
            info.add_text(key, json.dumps(value))
    return info


def save_images(images: torch.Tensor, root: Path, filename_prefix: str, *, folder_type: str,
                compress_level: int, prompt: Any = None, extra_pnginfo: Any = None,
                metadata: bool = True) -> list[dict]:
    """Write each image of the batch as PNG; the UI records `{filename, subfolder, type}`.

    `metadata=False` (the `--disable-metadata` flag) writes no text chunks at all, as ComfyUI's
    SaveImage does under `args.disable_metadata`."""
    from PIL import Image

    check_image_batch(images)
    # images: [B, H, W, C]
    folder, filename, counter, subfolder = save_location(
        root, filename_prefix, int(images.shape[2]), int(images.shape[1]))
    pnginfo = png_metadata(prompt, extra_pnginfo) if metadata else None
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


def preview_target(temp_dir: Path) -> SaveTarget:
    """PreviewImage's target: the temp folder, type "temp", level 1 and, as ComfyUI's, a random
    `_temp_xxxxx` suffix per instance so concurrent previews never share a counter."""
    suffix = "".join(secrets.choice(_PREVIEW_SUFFIX_LETTERS) for _ in range(5))
    return SaveTarget(Path(temp_dir), "temp", f"_temp_{suffix}", PREVIEW_COMPRESS_LEVEL)


def write_image_batch(images: torch.Tensor, filename_prefix: str, target: SaveTarget, *, prompt: Any = None,
                      extra_pnginfo: Any = None, metadata: bool = True) -> dict:
    """ComfyUI's `SaveImage.save_images` for one target: the files, and `{"ui": {"images": [...]}}`."""
    results = save_images(images, Path(target.output_dir), filename_prefix + target.prefix_append,
                          folder_type=target.type, compress_level=target.compress_level, prompt=prompt,
                          extra_pnginfo=extra_pnginfo, metadata=metadata)
    return {"ui": {"images": results}}
