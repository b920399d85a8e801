"""FreSca (Huang et al. 2025, "FreSca: Scaling in Frequency Space Enhances Diffusion Models",
arXiv 2504.02154) as a `sampler_pre_cfg_function`.

Behaviour of ComfyUI's comfy_extras/nodes_fresca.py: the guidance `cond - uncond` is scaled in
the Fourier domain, `scale_low` inside the centred band of `2*min(cutoff, side//2)` frequencies
on each spatial axis, `scale_high` outside, and the positive rewritten as `uncond + filtered`.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


def frequency_scale(x: torch.Tensor, scale_low: float, scale_high: float, freq_cutoff: int) -> torch.Tensor:
    """`x [B, C, ...spatial]` with its (shifted) low frequencies scaled by `scale_low` and the
    others by `scale_high`; float32 maths, returned in `x`'s dtype."""
    dtype = x.dtype
    freq = torch.fft.fftshift(torch.fft.fftn(x.to(torch.float32), dim=(-2, -1)), dim=(-2, -1))
    mask = torch.ones(freq.shape, device=x.device) * scale_high
    low = mask
    for dim in range(2, freq.ndim):
        centre = freq.shape[dim] // 2
        half = min(freq_cutoff, centre)
        low = low.narrow(dim, centre - half, half * 2)
    low[:] = scale_low  # a view: writes the centre of `mask`
    freq = torch.fft.ifftshift(freq * mask, dim=(-2, -1))
    return torch.fft.ifftn(freq, dim=(-2, -1)).real.to(dtype)


@dataclass(frozen=True)
class FreSca:
    """Pre-CFG hook; skipped when the positive or negative prediction is absent."""

    scale_low: float
    scale_high: float
    freq_cutoff: int

    def __call__(self, args: dict) -> list:
        conds_out = args["conds_out"]
        if len(conds_out) <= 1 or None in args["conds"][:2]:
            return conds_out
        cond, uncond = conds_out[0], conds_out[1]
        filtered = frequency_scale(cond - uncond, self.scale_low, self.scale_high, self.freq_cutoff)
        return [filtered + uncond, uncond] + list(conds_out[2:])

    def cache_signature(self) -> tuple:
        return ("FreSca", self.scale_low, self.scale_high, self.freq_cutoff)
