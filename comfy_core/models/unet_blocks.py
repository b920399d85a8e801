"""UNet building blocks in the LDM layout: timestep embedding, ResBlock, Downsample, Upsample.

Architecture of Ho et al. 2020 ("Denoising Diffusion Probabilistic Models") as used by latent
diffusion (Rombach et al. 2022); parameter names follow the CompVis/Stability
`ldm/modules/diffusionmodules/openaimodel.py` layout so checkpoints load without renaming
(`in_layers.0/2`, `emb_layers.1`, `out_layers.0/3`, `skip_connection`, `op`, `conv`).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def timestep_embedding(timesteps: torch.Tensor, dim: int, max_period: float = 10000.0) -> torch.Tensor:
    """Sinusoidal embedding of (possibly fractional) timesteps, `[B] -> [B, dim]`, cos half first.

    Vaswani et al. 2017 ("Attention Is All You Need") positional encoding, in the order the LDM
    UNet uses (`cat(cos, sin)`, frequencies `exp(-ln(max_period) * i / half)`).
    """
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=timesteps.device) / half)
    args = timesteps[:, None].float() * freqs[None]  # [B, half]
    emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)  # [B, 2*half]
    if dim % 2:
        emb = torch.cat([emb, torch.zeros_like(emb[:, :1])], dim=-1)
    return emb


def group_norm(channels: int, eps: float = 1e-5) -> nn.GroupNorm:
    """The 32-group normalisation every LDM block uses."""
    return nn.GroupNorm(32, channels, eps=eps)


class ResBlock(nn.Module):
    """`x + f(x, emb)` with the timestep embedding added between the two 3x3 convolutions
    (no scale-shift norm, as SD1/SD2/SDXL)."""

    def __init__(self, channels: int, emb_channels: int, out_channels: int) -> None:
        super().__init__()
        self.in_layers = nn.Sequential(group_norm(channels), nn.SiLU(), nn.Conv2d(channels, out_channels, 3, padding=1))
        self.emb_layers = nn.Sequential(nn.SiLU(), nn.Linear(emb_channels, out_channels))
        self.out_layers = nn.Sequential(group_norm(out_channels), nn.SiLU(), nn.Dropout(0.0),
                                        nn.Conv2d(out_channels, out_channels, 3, padding=1))
        self.skip_connection = nn.Identity() if channels == out_channels else nn.Conv2d(channels, out_channels, 1)

    def forward(self, x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        # x [B, C, H, W], emb [B, E]
        h = self.in_layers(x)  # [B, C', H, W]
        h = h + self.emb_layers(emb).to(h.dtype)[:, :, None, None]
        h = self.out_layers(h)
        return self.skip_connection(x) + h


class Downsample(nn.Module):
    """Stride-2 3x3 convolution (parameter `op`)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.op = nn.Conv2d(channels, channels, 3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.op(x)


class Upsample(nn.Module):
    """Nearest-neighbour 2x upsampling then a 3x3 convolution (parameter `conv`).

    `output_shape` (the matching skip tensor's shape) makes odd latent sizes round-trip, as the
    LDM code does when it is given the skip's size.
    """

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor, output_shape: tuple[int, ...] | None = None) -> torch.Tensor:
        if output_shape is not None:
            x = F.interpolate(x, size=tuple(output_shape[-2:]), mode="nearest")
        else:
            x = F.interpolate(x, scale_factor=2.0, mode="nearest")
        return self.conv(x)
