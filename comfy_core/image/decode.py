"""Image files to IMAGE and MASK tensors, ComfyUI's LoadImage and LoadImageMask rules
(nodes.py at 0.3.64, behaviour in reference/comfyui-contract.md), written here."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# Pillow formats whose extra frames are not an animation (MPO: a stereo pair from cameras).
SINGLE_FRAME_FORMATS = frozenset({"MPO"})


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
        if len(images) > 1 and img.format not in SINGLE_FRAME_FORMATS:
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
