"""Porter-Duff compositing of two images with alpha.

T. Porter and T. Duff, "Compositing Digital Images", SIGGRAPH 1984, with the separable blend
modes of the W3C "Compositing and Blending Level 1" note (darken, lighten, multiply, screen,
overlay) in their premultiplied form; mode names, order and conventions as ComfyUI's
`comfy_extras/nodes_compositing.py` (PorterDuffImageComposite), written here.

ComfyUI's alphas arrive as MASKs, where 1 means transparent: they are turned into coverage
(1 - mask) on the way in and back into masks on the way out. Colours are un-premultiplied where
the result's coverage exceeds 1e-5 (elsewhere 0) and clamped to 0..1.
"""
from __future__ import annotations

from typing import Callable

import torch

Pair = tuple[torch.Tensor, torch.Tensor]

# (src colour, src alpha, dst colour, dst alpha), premultiplied -> (colour, alpha).
_Rule = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], Pair]


def _union(sa: torch.Tensor, da: torch.Tensor) -> torch.Tensor:
    """Coverage of "either": sa + da - sa * da."""
    return sa + da - sa * da


def _overlay(s: torch.Tensor, sa: torch.Tensor, d: torch.Tensor, da: torch.Tensor) -> Pair:
    # Multiply where the destination is dark (2 d < da), screen where it is light.
    colour = torch.where(2 * d < da, 2 * s * d, sa * da - 2 * (da - s) * (sa - d))
    return colour, _union(sa, da)


RULES: dict[str, _Rule] = {
    "ADD": lambda s, sa, d, da: (torch.clamp(s + d, 0, 1), torch.clamp(sa + da, 0, 1)),
    "CLEAR": lambda s, sa, d, da: (torch.zeros_like(d), torch.zeros_like(da)),
    "DARKEN": lambda s, sa, d, da: ((1 - da) * s + (1 - sa) * d + torch.min(s, d), _union(sa, da)),
    "DST": lambda s, sa, d, da: (d, da),
    "DST_ATOP": lambda s, sa, d, da: (sa * d + (1 - da) * s, sa),
    "DST_IN": lambda s, sa, d, da: (d * sa, sa * da),
    "DST_OUT": lambda s, sa, d, da: ((1 - sa) * d, (1 - sa) * da),
    "DST_OVER": lambda s, sa, d, da: (d + (1 - da) * s, da + (1 - da) * sa),
    "LIGHTEN": lambda s, sa, d, da: ((1 - da) * s + (1 - sa) * d + torch.max(s, d), _union(sa, da)),
    "MULTIPLY": lambda s, sa, d, da: (s * d, sa * da),
    "OVERLAY": _overlay,
    "SCREEN": lambda s, sa, d, da: (s + d - s * d, _union(sa, da)),
    "SRC": lambda s, sa, d, da: (s, sa),
    "SRC_ATOP": lambda s, sa, d, da: (da * s + (1 - sa) * d, da),
    "SRC_IN": lambda s, sa, d, da: (s * da, sa * da),
    "SRC_OUT": lambda s, sa, d, da: ((1 - da) * s, (1 - da) * sa),
    "SRC_OVER": lambda s, sa, d, da: (s + (1 - sa) * d, sa + (1 - sa) * da),
    "XOR": lambda s, sa, d, da: ((1 - da) * s + (1 - sa) * d, (1 - da) * sa + (1 - sa) * da),
}

# Below this coverage a pixel is treated as empty (colour 0) instead of dividing by ~0.
_EMPTY = 1e-5


def porter_duff(source: torch.Tensor, source_mask: torch.Tensor, destination: torch.Tensor,
                destination_mask: torch.Tensor, mode: str) -> Pair:
    """Composite `source` over/with `destination` ([..., H, W, C], same shape) by `mode`.

    The masks are [..., H, W, 1] (1 = transparent). Returns the colour [..., H, W, C] and the
    result's mask [..., H, W, 1]."""
    src_alpha, dst_alpha = 1 - source_mask, 1 - destination_mask
    colour, alpha = RULES[mode](source * src_alpha, src_alpha, destination * dst_alpha, dst_alpha)
    colour = torch.where(alpha > _EMPTY, colour / alpha, torch.zeros_like(colour))
    return torch.clamp(colour, 0, 1), 1 - alpha
