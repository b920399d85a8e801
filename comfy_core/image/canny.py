"""Canny edge detection on torch (Canny 1986, "A Computational Approach to Edge Detection"),
with the conventions of kornia's `kornia.filters.canny`, which ComfyUI's Canny node calls:

1. RGB -> grey with the ITU-R 601 weights (0.299, 0.587, 0.114);
2. a separable 5x5 Gaussian blur, sigma 1, reflected borders;
3. the unnormalised Sobel gradient (replicated borders): magnitude `sqrt(gx^2 + gy^2 + eps)`,
   direction rounded to a multiple of 45 degrees;
4. non-maximum suppression against the two neighbours along that direction (the magnitude is
   taken as `sqrt(eps)` outside the image): strictly greater than both, except that along the
   right (0) and down (2) directions a tie is accepted, so of two equal pixels across a step the
   left/upper one stays, as in OpenCV; a pixel no larger than a flat one is never kept;
5. double threshold (strict: weak above `low`, strong above `high`) and hysteresis: a weak pixel
   8-connected to a strong one becomes strong, repeated until nothing changes.

Written here from that description; no kornia or OpenCV needed. Thresholds are in units of the
unnormalised Sobel magnitude, as kornia's (ComfyUI passes its node's 0.01..0.99 values as they are).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

GREY_WEIGHTS = (0.299, 0.587, 0.114)
# (dy, dx) of the neighbour in direction k, k * 45 degrees from +x towards +y (down).
_DIRECTIONS = ((0, 1), (1, 1), (1, 0), (1, -1), (0, -1), (-1, -1), (-1, 0), (-1, 1))


def to_grey(image: torch.Tensor) -> torch.Tensor:
    """[B, 3, H, W] RGB (or [B, 1, H, W]) -> [B, 1, H, W]."""
    if image.shape[1] == 1:
        return image
    r, g, b = image[:, 0:1], image[:, 1:2], image[:, 2:3]
    return GREY_WEIGHTS[0] * r + GREY_WEIGHTS[1] * g + GREY_WEIGHTS[2] * b


def gaussian_kernel1d(size: int, sigma: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """`exp(-n^2 / 2 sigma^2)` at integer offsets n from the centre, normalised to sum 1."""
    n = torch.arange(size, dtype=dtype, device=device) - size // 2
    k = torch.exp(-(n ** 2) / (2.0 * sigma ** 2))
    return k / k.sum()


def gaussian_blur(image: torch.Tensor, size: int = 5, sigma: float = 1.0) -> torch.Tensor:
    """Separable Gaussian blur of [B, C, H, W] with reflected borders (rows, then columns)."""
    k = gaussian_kernel1d(size, sigma, image.dtype, image.device)
    c = image.shape[1]
    pad = size // 2
    x = F.pad(image, (pad, pad, 0, 0), mode="reflect")
    x = F.conv2d(x, k.view(1, 1, 1, size).repeat(c, 1, 1, 1), groups=c)
    x = F.pad(x, (0, 0, pad, pad), mode="reflect")
    return F.conv2d(x, k.view(1, 1, size, 1).repeat(c, 1, 1, 1), groups=c)


def sobel(image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Unnormalised Sobel derivatives (gx, gy) of [B, C, H, W], replicated borders."""
    kx = torch.tensor([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]], dtype=image.dtype, device=image.device)
    kernel = torch.stack([kx, kx.t()])[:, None]  # [2, 1, 3, 3]
    b, c, h, w = image.shape
    padded = F.pad(image.reshape(b * c, 1, h, w), (1, 1, 1, 1), mode="replicate")
    out = F.conv2d(padded, kernel).view(b, c, 2, h, w)
    return out[:, :, 0], out[:, :, 1]


def hysteresis(weak: torch.Tensor, strong: torch.Tensor) -> torch.Tensor:
    """Grow `strong` (bool [B, 1, H, W]) into 8-connected `weak` pixels until it stops changing."""
    edges = strong.float()
    weak = weak & ~strong
    while True:
        grown = F.max_pool2d(edges, 3, stride=1, padding=1) > 0
        new = edges.bool() | (weak & grown)
        if torch.equal(new, edges.bool()):
            return new
        edges = new.float()


def canny(image: torch.Tensor, low_threshold: float = 0.1, high_threshold: float = 0.2,
          kernel_size: int = 5, sigma: float = 1.0, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, C, H, W] (C = 1 or 3) -> (suppressed magnitude, edges 0/1), both [B, 1, H, W]."""
    if image.ndim != 4 or image.shape[1] not in (1, 3):
        raise ValueError(f"canny: expected [B, 1 or 3, H, W], got {tuple(image.shape)}")
    if not 0 < low_threshold <= high_threshold:
        raise ValueError(f"canny: need 0 < low_threshold <= high_threshold, got {low_threshold}, {high_threshold}")
    out_dtype = image.dtype if image.is_floating_point() else torch.float32
    work = image.float() if out_dtype in (torch.float16, torch.bfloat16) or not image.is_floating_point() else image
    gx, gy = sobel(gaussian_blur(to_grey(work), kernel_size, sigma))
    h, w = gx.shape[-2:]
    padded = torch.sqrt(F.pad(gx, (1, 1, 1, 1)) ** 2 + F.pad(gy, (1, 1, 1, 1)) ** 2 + eps)
    magnitude = padded[..., 1:1 + h, 1:1 + w]
    direction = (torch.nan_to_num(torch.atan2(gy, gx)) * (4 / math.pi)).round()
    forward = (direction % 8).long()
    backward = ((direction + 4) % 8).long()
    neighbours = torch.stack([padded[..., 1 + dy:1 + dy + h, 1 + dx:1 + dx + w] for dy, dx in _DIRECTIONS], 2)
    ahead = torch.gather(neighbours, 2, forward.unsqueeze(2)).squeeze(2)
    behind = torch.gather(neighbours, 2, backward.unsqueeze(2)).squeeze(2)

    def beats(other: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        tie_ok = (index == 0) | (index == 2)
        return (magnitude > other) | (tie_ok & (magnitude == other))

    keep = beats(ahead, forward) & beats(behind, backward) & (magnitude > padded[..., :1, :1])
    magnitude = magnitude * keep
    edges = hysteresis(magnitude > low_threshold, magnitude > high_threshold)
    return magnitude.to(out_dtype), edges.to(out_dtype)
