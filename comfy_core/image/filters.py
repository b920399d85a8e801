"""Gaussian blur and unsharp-mask sharpening of IMAGE batches.

Behaviour of ComfyUI's `comfy_extras/nodes_post_processing.py` (ImageBlur, ImageSharpen), written
here. The kernel is (2 r + 1) x (2 r + 1) samples of exp(-d^2 / (2 sigma^2)) on a grid that spans
-1..1 whatever the radius r (so sigma is in units of the radius, not of pixels), normalised to
sum 1. Images are extended by mirror reflection (without repeating the edge pixel) before the
convolution, so the output keeps the input's size.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def gaussian_kernel(size: int, sigma: float, device: torch.device | str | None = None) -> torch.Tensor:
    """A [size, size] Gaussian on the grid linspace(-1, 1, size)^2, summing to 1."""
    axis = torch.linspace(-1, 1, size, device=device)
    rows, cols = torch.meshgrid(axis, axis, indexing="ij")
    distance = torch.sqrt(rows * rows + cols * cols)
    weights = torch.exp(-(distance * distance) / (2.0 * sigma * sigma))
    return weights / weights.sum()


def _convolve(images: torch.Tensor, kernel: torch.Tensor, radius: int) -> torch.Tensor:
    """Each channel of `images` [B, H, W, C] convolved with `kernel` [k, k] (k = 2 radius + 1)
    over its mirror-reflected extension; [B, H, W, C]."""
    channels = images.shape[-1]
    weight = kernel.to(images.dtype).expand(channels, 1, *kernel.shape)  # [C, 1, k, k]: one filter per channel
    planes = F.pad(images.movedim(-1, 1), (radius, radius, radius, radius), mode="reflect")  # [B, C, H+2r, W+2r]
    return F.conv2d(planes, weight, groups=channels).movedim(1, -1)


def blur(images: torch.Tensor, radius: int, sigma: float) -> torch.Tensor:
    """Gaussian blur of [B, H, W, C] with a (2 radius + 1)^2 kernel (radius < H and < W)."""
    kernel = gaussian_kernel(radius * 2 + 1, sigma, device=images.device)
    return _convolve(images, kernel, radius)


def sharpen(images: torch.Tensor, radius: int, sigma: float, alpha: float) -> torch.Tensor:
    """Unsharp masking of [B, H, W, C], clamped to 0..1: the kernel is the Gaussian scaled by
    -10 alpha with its centre raised so that it sums to 1 (flat areas stay unchanged, edges are
    pushed away from their blurred surround)."""
    kernel = (gaussian_kernel(radius * 2 + 1, sigma, device=images.device) * -(alpha * 10)).to(images.dtype)
    kernel[radius, radius] = kernel[radius, radius] - kernel.sum() + 1.0
    return torch.clamp(_convolve(images, kernel, radius), 0, 1)
