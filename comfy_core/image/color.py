"""RGB <-> YCbCr on IMAGE channels, full range 0..1.

The JPEG (JFIF) conversion with BT.601 luma weights, in the constants of kornia 0.9's
`kornia.color.rgb_to_ycbcr` / `ycbcr_to_rgb` (what ComfyUI's ImageRGBToYUV / ImageYUVToRGB call),
written here: Cb = (B - Y) 0.564 + 0.5, Cr = (R - Y) 0.713 + 0.5; the inverse uses the exact
reciprocals of those factors (to 10 decimals) and clamps to 0..1.
"""
from __future__ import annotations

import torch

_KR, _KG, _KB = 0.299, 0.587, 0.114
_CB, _CR = 0.564, 0.713
# Inverse factors, to 10 decimals: 1 / 0.713, 1 / 0.564, and green's share of each.
_R_FROM_CR = 1.4025245442
_G_FROM_CR = 0.7144034731
_G_FROM_CB = 0.3443401356
_B_FROM_CB = 1.7730496454


def rgb_to_ycbcr(image: torch.Tensor) -> torch.Tensor:
    """[..., 3] RGB to [..., 3] (Y, Cb, Cr)."""
    r, g, b = image[..., 0], image[..., 1], image[..., 2]
    y = _KR * r + _KG * g + _KB * b
    return torch.stack([y, (b - y) * _CB + 0.5, (r - y) * _CR + 0.5], dim=-1)


def ycbcr_to_rgb(image: torch.Tensor) -> torch.Tensor:
    """[..., 3] (Y, Cb, Cr) to [..., 3] RGB, clamped to 0..1."""
    y, cb, cr = image[..., 0], image[..., 1] - 0.5, image[..., 2] - 0.5
    rgb = torch.stack([y + _R_FROM_CR * cr, y - _G_FROM_CR * cr - _G_FROM_CB * cb, y + _B_FROM_CB * cb], dim=-1)
    return rgb.clamp(0, 1)
