"""Bilinear resizing by spherical interpolation ("bislerp") of latent pixel vectors.

Behaviour of ComfyUI's `comfy/utils.py: bislerp` (LatentUpscale's "bislerp" method), written here
from its description: each latent pixel is a C-vector; resizing runs along the width and then
along the height, and each output pixel is the slerp (Shoemake 1985, "Animating Rotation with
Quaternion Curves") of its two source neighbours' directions with their norms interpolated
linearly. Neighbours and ratios come from bilinear interpolation (align_corners=False) of the
source index grid, so the sample positions are exactly those of `F.interpolate(mode="bilinear")`.
Near-parallel neighbours (cos > 1 - 1e-5) take the first neighbour; near-opposite ones
(cos < -1 + 1e-5) are blended linearly.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def slerp_rows(a: torch.Tensor, b: torch.Tensor, ratio: torch.Tensor) -> torch.Tensor:
    """Row-wise slerp of `a`, `b` [N, C] at `ratio` [N, 1], with linearly interpolated norms."""
    a_norm = a.norm(dim=-1, keepdim=True)  # [N, 1]
    b_norm = b.norm(dim=-1, keepdim=True)
    a_dir = torch.where(a_norm == 0, torch.zeros_like(a), a / a_norm)
    b_dir = torch.where(b_norm == 0, torch.zeros_like(b), b / b_norm)
    cos = (a_dir * b_dir).sum(-1)  # [N]
    omega = torch.acos(cos)
    sin_omega = torch.sin(omega)
    r = ratio.squeeze(1)
    out = (torch.sin((1.0 - r) * omega) / sin_omega).unsqueeze(1) * a_dir \
        + (torch.sin(r * omega) / sin_omega).unsqueeze(1) * b_dir
    out = out * (a_norm * (1.0 - ratio) + b_norm * ratio)
    parallel = cos > 1 - 1e-5
    opposite = cos < 1e-5 - 1
    out[parallel] = a[parallel]
    out[opposite] = (a * (1.0 - ratio) + b * ratio)[opposite]
    return out


def _neighbours(old: int, new: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For each of `new` output positions: left index, right index and ratio, as [new] tensors."""
    def resample(values: torch.Tensor) -> torch.Tensor:
        return F.interpolate(values.reshape(1, 1, 1, -1), size=(1, new), mode="bilinear").reshape(-1)

    index = torch.arange(old, dtype=torch.float32, device=device)
    left_f = resample(index)
    right_src = index + 1
    right_src[-1] -= 1  # the last pixel's right neighbour is itself
    right = resample(right_src).to(torch.int64)
    return left_f.to(torch.int64), right, left_f - left_f.floor()


def _slerp_last_axis(x: torch.Tensor, new: int) -> torch.Tensor:
    """Resize the last axis of x [B, C, H, W] to `new` by slerp between neighbours."""
    b, c, h, w = x.shape
    left, right, ratio = _neighbours(w, new, x.device)
    first = x[..., left].movedim(1, -1).reshape(-1, c)  # [B*H*new, C]
    second = x[..., right].movedim(1, -1).reshape(-1, c)
    ratios = ratio.reshape(1, 1, new).expand(b, h, new).reshape(-1, 1)
    return slerp_rows(first, second, ratios).reshape(b, h, new, c).movedim(-1, 1)


def bislerp(samples: torch.Tensor, width: int, height: int) -> torch.Tensor:
    """Resize latents [B, C, H, W] to [B, C, height, width] (width pass, then height pass)."""
    dtype = samples.dtype
    x = _slerp_last_axis(samples.float(), width)  # [B, C, H, width]
    x = _slerp_last_axis(x.transpose(-1, -2), height).transpose(-1, -2)  # [B, C, height, width]
    return x.to(dtype)
