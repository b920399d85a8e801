"""Resizing `[B, C, H, W]` samples (images moved channels-first, or latents): ComfyUI's
`comfy.utils.common_upscale` (centre crop to the target's aspect ratio, then torch's
interpolation modes) and `comfy.utils.lanczos` (Pillow on uint8 pixels), written here."""
from __future__ import annotations

from typing import TYPE_CHECKING

from comfy_core.image.pixels import image_to_uint8

if TYPE_CHECKING:
    import torch


def lanczos(samples: torch.Tensor, width: int, height: int) -> torch.Tensor:
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
        return lanczos(samples, width, height)
    return torch.nn.functional.interpolate(samples, size=(height, width), mode=method)
