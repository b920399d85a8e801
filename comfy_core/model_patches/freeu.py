"""FreeU (Si et al. 2024, "FreeU: Free Lunch in Diffusion U-Net", arXiv 2309.11497) as an
`output_block_patch`.

Behaviour of ComfyUI's comfy_extras/nodes_freelunch.py (FreeU, FreeU_V2): at the decoder levels
whose backbone width is 4x or 2x the model's base width, the first half of the backbone
channels is scaled by `b` (V2: by `1 + (b - 1) * m`, `m` the per-sample min-max normalised
channel mean), and the skip features are filtered in the Fourier domain: the `2t x 2t` lowest
frequencies (t = 1) are scaled by `s`, the rest kept.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


def fourier_filter(x: torch.Tensor, threshold: int, scale: float) -> torch.Tensor:
    """`x [B, C, H, W]` with its centred `2*threshold` square of (shifted) 2-D frequencies
    scaled by `scale`; computed in float32, returned in `x`'s dtype."""
    freq = torch.fft.fftshift(torch.fft.fftn(x.float(), dim=(-2, -1)), dim=(-2, -1))
    b, c, h, w = freq.shape
    mask = torch.ones((b, c, h, w), device=x.device)
    ch, cw = h // 2, w // 2
    # Python slice semantics on purpose: the same window as the FreeU reference on tiny maps.
    mask[..., ch - threshold:ch + threshold, cw - threshold:cw + threshold] = scale
    freq = torch.fft.ifftshift(freq * mask, dim=(-2, -1))
    return torch.fft.ifftn(freq, dim=(-2, -1)).real.to(x.dtype)


def _filter_anywhere(x: torch.Tensor, threshold: int, scale: float) -> torch.Tensor:
    """`fourier_filter`, on the CPU when the tensor's device has no FFT (some accelerators)."""
    try:
        return fourier_filter(x, threshold, scale)
    except RuntimeError:
        return fourier_filter(x.cpu(), threshold, scale).to(x.device)


def backbone_factor(h: torch.Tensor, b: float, version: int) -> torch.Tensor | float:
    """The factor on the first half of the backbone channels: `b` (V1), or V2's
    `(b - 1) * normalised_mean + 1` shaped [B, 1, H, W]."""
    if version == 1:
        return b
    mean = h.mean(1).unsqueeze(1)  # [B, 1, H, W]
    flat = mean.view(mean.shape[0], -1)
    hi = torch.max(flat, dim=-1, keepdim=True)[0][:, :, None, None]
    lo = torch.min(flat, dim=-1, keepdim=True)[0][:, :, None, None]
    return (b - 1) * ((mean - lo) / (hi - lo)) + 1


@dataclass(frozen=True)
class FreeU:
    """`output_block_patch(h, skip, transformer_options) -> (h, skip)`.

    `scales`: `((backbone channels, b, s), ...)`, ComfyUI's `{4*base: (b1, s1), 2*base: (b2, s2)}`.
    """

    scales: tuple[tuple[int, float, float], ...]
    version: int = 1

    @classmethod
    def for_model(cls, model_channels: int, b1: float, b2: float, s1: float, s2: float,
                  version: int = 1) -> "FreeU":
        return cls(((model_channels * 4, b1, s1), (model_channels * 2, b2, s2)), version)

    def __call__(self, h: torch.Tensor, skip: torch.Tensor, transformer_options: dict) -> tuple[torch.Tensor, torch.Tensor]:
        channels = int(h.shape[1])
        found = next(((b, s) for c, b, s in self.scales if c == channels), None)
        if found is None:
            return h, skip
        b, s = found
        half = channels // 2
        h = torch.cat([h[:, :half] * backbone_factor(h, b, self.version), h[:, half:]], dim=1)
        return h, _filter_anywhere(skip, 1, s)

    def cache_signature(self) -> tuple:
        return ("FreeU", self.scales, self.version)
