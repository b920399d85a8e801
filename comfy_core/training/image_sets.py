"""A training image set as one IMAGE batch: ComfyUI 0.3.64's `load_and_process_images`
(comfy_extras/nodes_train.py @a125cd84b054a57729b5eecab930ca9408719832, the dataset loaders
LoadImageSetFromFolderNode / LoadImageTextSetFromFolderNode), written here.

Each file is opened with Pillow (no EXIF rotation), a 32-bit 'I' image scaled by 1/255, converted
to RGB. The batch size is `width` x `height` when both are given, else the first image's (a
missing one of the two is taken from the first image: ComfyUI fails there). An image of another
size is, by `resize_method`: "Stretch" or "Pad" resized with Lanczos (ComfyUI's "Pad" resizes
too), "Crop" cut from its top-left corner (Pillow fills what lies outside with black), "None"
refused.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch

RESIZE_METHODS = ("None", "Stretch", "Crop", "Pad")


class ImageSetError(ValueError):
    """An image set that cannot be one batch (no image, sizes differing with "None")."""


def load_image_set(paths: Sequence[Path], resize_method: str = "None", width: int | None = None,
                   height: int | None = None) -> torch.Tensor:
    """The images at `paths` as an IMAGE batch `[N, H, W, 3]` in 0..1 (see the module docstring)."""
    import numpy as np
    from PIL import Image

    if resize_method not in RESIZE_METHODS:
        raise ImageSetError(f"resize_method must be one of {list(RESIZE_METHODS)}, got {resize_method!r}")
    if not paths:
        raise ImageSetError("No valid images found in input")
    out = []
    for path in paths:
        with Image.open(path) as opened:
            img = opened.point(lambda v: v * (1 / 255)) if opened.mode == "I" else opened
            img = img.convert("RGB")
        if width is None or height is None:
            width, height = width or img.size[0], height or img.size[1]
        if img.size != (width, height):
            if resize_method in ("Stretch", "Pad"):
                img = img.resize((width, height), Image.Resampling.LANCZOS)
            elif resize_method == "Crop":
                img = img.crop((0, 0, width, height))
            else:
                raise ImageSetError("Your input image size does not match the first image in the dataset. Either "
                                    "select a valid resize method or use the same size for all images.")
        out.append(torch.from_numpy(np.array(img).astype(np.float32) / 255.0)[None])  # [1, H, W, 3]
    return torch.cat(out, dim=0)
