"""HiDream-O1's patch-seam smoothing (today's ComfyUI, comfy_extras/nodes_hidream_o1.py:
HiDreamO1PatchSeamSmoothing; behaviour read there, code written here).

The network works on a fixed 32x32 patch grid, which can leave seams. In the gated part of
sampling (network timestep t with end_t < t <= start_t), the diffusion-model call is repeated on
the input rolled by a few sub-patch offsets, each output rolled back, and the passes blended: the
mean, the per-pixel median, or Hann-window weights that favour each pass away from its own patch
borders. A "ramp" runs more passes as sampling nears its end (the gated range split evenly into
levels). The blend replaces the plain output inside the image, faded in over 4 pixels beyond a
32-pixel border (where the rolls wrap around), scaled by `strength`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch

PATCH = 32
EDGE_FEATHER = 4
SHIFTS = {
    ("single_shift", 2): ((0, 0), (16, 16)),
    ("single_shift", 4): ((0, 0), (16, 0), (0, 16), (16, 16)),
    ("single_shift", 8): ((0, 0), (16, 0), (0, 16), (16, 16), (8, 8), (24, 8), (8, 24), (24, 24)),
    ("symmetric", 2): ((-8, -8), (8, 8)),
    ("symmetric", 4): ((-8, -8), (8, -8), (-8, 8), (8, 8)),
    ("symmetric", 8): ((-12, -12), (4, -12), (-12, 4), (4, 4), (-4, -4), (12, -4), (-4, 12), (12, 12)),
}
PASSES = {"2": (2,), "4": (4,), "ramp_2_4": (2, 4), "ramp_2_4_8": (2, 4, 8)}
PATTERNS = ("single_shift", "symmetric")
BLENDS = ("average", "window", "median")


def hann_tile(cy: int, cx: int, size: int = PATCH) -> torch.Tensor:
    """[size, size] periodic Hann window peaking at (cy, cx)."""
    half = size // 2
    dy = (torch.arange(size).view(size, 1) - cy + half) % size - half
    dx = (torch.arange(size).view(1, size) - cx + half) % size - half
    return 0.25 * (1 + torch.cos(math.pi * dy / half)) * (1 + torch.cos(math.pi * dx / half))


def edge_ramp(height: int, width: int, device: Any, dtype: torch.dtype) -> torch.Tensor:
    """[H, W]: 0 within 32 pixels of an edge, rising linearly to 1 over the next 4."""
    ys = torch.arange(height, device=device, dtype=torch.float32)
    xs = torch.arange(width, device=device, dtype=torch.float32)
    ys, xs = torch.minimum(ys, height - 1 - ys), torch.minimum(xs, width - 1 - xs)
    return (((ys - PATCH) / EDGE_FEATHER).clamp(0, 1)[:, None] * ((xs - PATCH) / EDGE_FEATHER).clamp(0, 1)[None]
            ).to(dtype)


def blend(preds: list[torch.Tensor], shifts: tuple[tuple[int, int], ...], how: str) -> torch.Tensor:
    """The passes' outputs [B, C, H, W] (rolled back) blended by `how`."""
    stacked = torch.stack(preds)  # [N, B, C, H, W]
    if how == "median":
        return stacked.median(dim=0).values
    if how == "window":
        half = PATCH // 2
        tiles = torch.stack([hann_tile((half - sy) % PATCH, (half - sx) % PATCH) for sy, sx in shifts])
        height, width = stacked.shape[-2:]
        weights = tiles.to(stacked).repeat(1, math.ceil(height / PATCH), math.ceil(width / PATCH))[:, :height, :width]
        total = weights.sum(0, keepdim=True)
        weights = torch.where(total < 1e-3, torch.full_like(weights, 1.0 / len(preds)),
                              weights / total.clamp(min=1e-8))
        return (stacked * weights[:, None, None]).sum(0)
    return stacked.mean(0)


@dataclass(frozen=True)
class PatchSeamSmoothing:
    """A DIFFUSION_MODEL wrapper `(executor, x, timesteps, ...)` (see the module docstring);
    `start_t` / `end_t`: the network timesteps of the start / end percent."""

    start_t: float
    end_t: float
    pattern: str
    passes: str
    how: str
    strength: float

    def __call__(self, executor: Callable[..., torch.Tensor], *args: Any, **kwargs: Any) -> torch.Tensor:
        x, t = args[0], float(args[1].flatten()[0])
        pred = executor(*args, **kwargs)
        if not self.end_t < t <= self.start_t:
            return pred
        levels = PASSES[self.passes]
        level = 0
        if len(levels) > 1:
            phase = (self.start_t - t) / max(self.start_t - self.end_t, 1e-8)
            level = min(int(phase * len(levels)), len(levels) - 1)
        shifts = SHIFTS[(self.pattern, levels[level])]
        preds = []
        for sy, sx in shifts:
            if sy == 0 and sx == 0:
                preds.append(pred)
                continue
            rolled = executor(torch.roll(x, shifts=(sy, sx), dims=(-2, -1)), *args[1:], **kwargs)
            preds.append(torch.roll(rolled, shifts=(-sy, -sx), dims=(-2, -1)))
        mixed = blend(preds, shifts, self.how)
        mask = edge_ramp(x.shape[-2], x.shape[-1], pred.device, pred.dtype) * self.strength
        return pred * (1.0 - mask) + mixed * mask

    def cache_signature(self) -> tuple:
        return ("HiDreamO1PatchSeamSmoothing", self.start_t, self.end_t, self.pattern, self.passes, self.how,
                self.strength)


__all__ = ["BLENDS", "PASSES", "PATTERNS", "PatchSeamSmoothing", "blend", "edge_ramp", "hann_tile"]
