"""Separable blend modes of two IMAGE batches, and their mix with the base image.

Behaviour of ComfyUI's `comfy_extras/nodes_post_processing.py` (ImageBlend), written here. The
modes follow the W3C "Compositing and Blending Level 1" formulas with image1 as the backdrop
`b` and image2 as the source `s`, except "difference", which is ComfyUI's signed `b - s` (not
|b - s|); negative results are clamped away by the final mix.
"""
from __future__ import annotations

from typing import Callable

import torch


def _soft_light_d(b: torch.Tensor) -> torch.Tensor:
    """The W3C soft-light helper D(b): ((16 b - 12) b + 4) b up to 0.25, sqrt(b) above."""
    return torch.where(b <= 0.25, ((16 * b - 12) * b + 4) * b, torch.sqrt(b))


MODES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "normal": lambda b, s: s,
    "multiply": lambda b, s: b * s,
    "screen": lambda b, s: 1 - (1 - b) * (1 - s),
    "overlay": lambda b, s: torch.where(b <= 0.5, 2 * b * s, 1 - 2 * (1 - b) * (1 - s)),
    "soft_light": lambda b, s: torch.where(s <= 0.5, b - (1 - 2 * s) * b * (1 - b),
                                           b + (2 * s - 1) * (_soft_light_d(b) - b)),
    "difference": lambda b, s: b - s,
}


def blend(image1: torch.Tensor, image2: torch.Tensor, factor: float, mode: str) -> torch.Tensor:
    """image1 * (1 - factor) + mode(image1, image2) * factor, clamped to 0..1 (shapes broadcast)."""
    blended = MODES[mode](image1, image2)
    return torch.clamp(image1 * (1 - factor) + blended * factor, 0, 1)
