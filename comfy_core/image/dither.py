"""Ordered (Bayer) dithering offsets for palette quantisation.

B. E. Bayer, "An optimum method for two-level rendition of continuous-tone pictures", 1973. The
threshold matrix of order 2^n is built recursively, M_0 = [[0]] and, with q = 4^n and
m = q M_{n-1}, M_n = [[m - 1.5, m + 0.5], [m + 1.5, m - 0.5]] / q: Bayer's index matrix I
rescaled to (I + 0.5) / order^2 - 0.5, centred on 0. As ComfyUI's ImageQuantize
(`comfy_extras/nodes_post_processing.py`, written here), each pixel of the 0..255 image gets
`spread * M + 0.5` added (spread = 512 / number of palette colours) and is then mapped to its
nearest palette colour without error diffusion.
"""
from __future__ import annotations

import math

import torch


def bayer_matrix(order: int) -> torch.Tensor:
    """The normalised [order, order] Bayer matrix (float64), order a power of two >= 1."""
    matrix = torch.zeros((1, 1), dtype=torch.float64)
    for level in range(1, int(math.log2(order)) + 1):
        scale = 4 ** level
        m = scale * matrix
        matrix = torch.cat([torch.cat([m - 1.5, m + 0.5], dim=1),
                            torch.cat([m + 1.5, m - 0.5], dim=1)], dim=0) / scale
    return matrix


def bayer_offsets(pixels: torch.Tensor, order: int, colors: int) -> torch.Tensor:
    """`pixels` [H, W, C] uint8 with each pixel's Bayer offset added, clamped and truncated
    back to uint8, ready for a nearest-colour palette lookup."""
    threshold = (2 * 256 / colors) * bayer_matrix(order) + 0.5  # [order, order] float64
    height, width = pixels.shape[0], pixels.shape[1]
    tiled = threshold.tile(math.ceil(height / order), math.ceil(width / order))[:height, :width, None]
    # The sum is taken into a float32 image, as ComfyUI's in-place add, so that the truncation
    # below sees the same values near integer boundaries.
    shifted = pixels.to(torch.float32).add_(tiled).clamp_(0, 255)
    return shifted.to(torch.uint8)
