"""Pixel preparation for inpainting and instruct-pix2pix conditioning.

After ComfyUI's `nodes.py: InpaintModelConditioning.encode` and `comfy_extras/nodes_ip2p.py`:
sides are cropped to multiples of 8 around the centre (offset `(size % 8) // 2`, as the VAE
crops), the mask is resized bilinearly to the image, and the pixels under the (rounded) mask are
replaced by mid grey, so the VAE does not encode what is to be repainted. Written here.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def _crop_slices(height: int, width: int) -> tuple[slice, slice]:
    h, w = (height // 8) * 8, (width // 8) * 8
    y0, x0 = (height % 8) // 2, (width % 8) // 2
    return slice(y0, y0 + h), slice(x0, x0 + w)


def crop_to_multiple_of_8(pixels: torch.Tensor) -> torch.Tensor:
    """IMAGE `[B, H, W, C]` -> its centred `[B, 8*(H//8), 8*(W//8), C]` part."""
    rows, cols = _crop_slices(pixels.shape[1], pixels.shape[2])
    return pixels[:, rows, cols, :]


def inpaint_inputs(pixels: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(pixels with the masked region grey, mask `[Bm, 1, H', W']`) for IMAGE `[B, H, W, C]`
    and MASK `[Bm, h, w]` (Bm 1 or B), both cropped to multiples of 8."""
    rows, cols = _crop_slices(pixels.shape[1], pixels.shape[2])
    mask = F.interpolate(mask.reshape(-1, 1, mask.shape[-2], mask.shape[-1]).float(),
                         size=(pixels.shape[1], pixels.shape[2]), mode="bilinear")[:, :, rows, cols]
    keep = (1.0 - mask.round()).squeeze(1)  # [Bm, H', W']: 0 where the model repaints
    masked = pixels[:, rows, cols, :].clone()
    for channel in range(min(3, masked.shape[-1])):
        masked[..., channel] = (masked[..., channel] - 0.5) * keep + 0.5
    return masked, mask
