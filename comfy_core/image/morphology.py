"""Grey-scale morphology with a flat square structuring element, on [B, C, H, W] planes.

Semantics of kornia 0.9's `kornia.morphology` (what ComfyUI's Morphology node calls with
`kernel = ones(k, k)` and the defaults: origin at (k // 2, k // 2), "geodesic" borders), written
here on torch's max pooling: dilation is the Minkowski sum (the structuring element is reflected,
so for even k the window runs from x - (k - 1 - k // 2) to x + k // 2), erosion the Minkowski
difference (x - k // 2 .. x + k - 1 - k // 2), and pixels outside the image are ignored (the
padding holds the reduction's identity, -inf or +inf). A flat square is separable, so each
pass is a k x 1 then a 1 x k maximum: O(k) per pixel instead of kornia's O(k^2).
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F


def _window_max(planes: torch.Tensor, size: int, before: int) -> torch.Tensor:
    """Maximum of each size x size window whose top-left corner is `before` pixels above and
    left of the output pixel; windows partly outside the image see only its pixels."""
    after = size - 1 - before
    padded = F.pad(planes, (before, after, before, after), mode="constant", value=-float("inf"))
    rows = F.max_pool2d(padded, kernel_size=(size, 1), stride=1)  # [B, C, H, W + size - 1]
    return F.max_pool2d(rows, kernel_size=(1, size), stride=1)  # [B, C, H, W]


def dilate(planes: torch.Tensor, size: int) -> torch.Tensor:
    """Grey-scale dilation of [B, C, H, W] by a flat size x size square."""
    return _window_max(planes, size, size - 1 - size // 2)


def erode(planes: torch.Tensor, size: int) -> torch.Tensor:
    """Grey-scale erosion of [B, C, H, W] by a flat size x size square."""
    return -_window_max(-planes, size, size // 2)


def opening(planes: torch.Tensor, size: int) -> torch.Tensor:
    """Erosion then dilation: removes bright details smaller than the square."""
    return dilate(erode(planes, size), size)


def closing(planes: torch.Tensor, size: int) -> torch.Tensor:
    """Dilation then erosion: fills dark details smaller than the square."""
    return erode(dilate(planes, size), size)


def gradient(planes: torch.Tensor, size: int) -> torch.Tensor:
    """Morphological gradient: dilation minus erosion (edges)."""
    return dilate(planes, size) - erode(planes, size)


def top_hat(planes: torch.Tensor, size: int) -> torch.Tensor:
    """White top-hat: the image minus its opening (small bright details)."""
    return planes - opening(planes, size)


def bottom_hat(planes: torch.Tensor, size: int) -> torch.Tensor:
    """Black top-hat: the closing minus the image (small dark details)."""
    return closing(planes, size) - planes


OPERATIONS: dict[str, Callable[[torch.Tensor, int], torch.Tensor]] = {
    "erode": erode, "dilate": dilate, "open": opening, "close": closing,
    "gradient": gradient, "bottom_hat": bottom_hat, "top_hat": top_hat,
}
