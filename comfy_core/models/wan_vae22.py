"""The levels of Wan 2.2's VAE (`wan2.2_vae.safetensors`, TI2V-5B): residual down/up blocks.

Wan 2.2's VAE (Wan Team 2025, Wan 2.2 release notes: "a high-compression VAE, 16 x 16 x 4")
takes the Wan 2.1 network and (1) folds each 2 x 2 pixel patch into channels before the encoder
and back after the decoder (`wan_vae_blocks.patchify`: 12 channels in and out), (2) wraps each
encoder level in a residual block whose shortcut is a parameter-free average over the pixels and
frames the level merges (`AvgDown3D`), and each decoder level in one whose shortcut duplicates
channels into the pixels and frames it creates (`DupUp3D`), and (3) keeps the width through the
upsampling convolutions. With 48 latent channels that is 16x spatial, 4x temporal compression.
Behaviour and names follow the original `wan/modules/vae2_2.py` as ComfyUI's
`comfy/ldm/wan/vae2_2.py` loads it (`encoder.downsamples.L.downsamples.N`, `decoder.upsamples.L.
upsamples.N`); written here from that description. The autoencoder itself is
`comfy_core.models.wan_vae.WanVAE`, which picks these levels for a `residual` configuration.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.models.wan_vae_blocks import FrameCache, Resample, ResidualBlock, run
from comfy_core.models.wan_vae_config import WanVAEConfig


class AvgDown3D(nn.Module):
    """[B, cin, T, H, W] -> [B, cout, T/ft, H/fs, W/fs]: each output channel is the mean of a
    group of (input channel, frame offset, row offset, column offset) values, in that order.
    A chunk whose frame count is not a multiple of `ft` (the first frame) is zero-padded in front."""

    def __init__(self, cin: int, cout: int, factor_t: int, factor_s: int) -> None:
        super().__init__()
        self.cout, self.factor_t, self.factor_s = cout, factor_t, factor_s
        spread = cin * factor_t * factor_s * factor_s
        if spread % cout:
            raise ValueError(f"AvgDown3D: {cin} channels x {factor_t * factor_s ** 2} do not split into {cout} groups")
        self.group = spread // cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ft, fs = self.factor_t, self.factor_s
        pad = (ft - x.shape[2] % ft) % ft
        if pad:
            x = F.pad(x, (0, 0, 0, 0, pad, 0))
        b, c, t, h, w = x.shape
        x = x.reshape(b, c, t // ft, ft, h // fs, fs, w // fs, fs)
        x = x.permute(0, 1, 3, 5, 7, 2, 4, 6)  # b c ft fs fs t h w
        x = x.reshape(b, self.cout, self.group, t // ft, h // fs, w // fs)
        return x.mean(dim=2)


class DupUp3D(nn.Module):
    """[B, cin, T, H, W] -> [B, cout, T*ft, H*fs, W*fs]: each input channel repeated, the copies
    spread over (output channel, frame offset, row offset, column offset). On the first chunk
    the first `ft - 1` frames are dropped, as the decoder makes one frame of the first latent."""

    def __init__(self, cin: int, cout: int, factor_t: int, factor_s: int) -> None:
        super().__init__()
        self.cout, self.factor_t, self.factor_s = cout, factor_t, factor_s
        spread = cout * factor_t * factor_s * factor_s
        if spread % cin:
            raise ValueError(f"DupUp3D: {cout} channels x {factor_t * factor_s ** 2} are not a multiple of {cin}")
        self.repeats = spread // cin

    def forward(self, x: torch.Tensor, first_chunk: bool = False) -> torch.Tensor:
        ft, fs = self.factor_t, self.factor_s
        b, _, t, h, w = x.shape
        x = x.repeat_interleave(self.repeats, dim=1)
        x = x.reshape(b, self.cout, ft, fs, fs, t, h, w).permute(0, 1, 5, 2, 6, 3, 7, 4)  # b c t ft h fs w fs
        x = x.reshape(b, self.cout, t * ft, h * fs, w * fs)
        return x[:, :, ft - 1:] if first_chunk else x


class DownResidualBlock(nn.Module):
    """An encoder level: residual blocks then (except the last level) a resample, plus the
    averaged input as shortcut (`downsamples.N`, `avg_shortcut`)."""

    takes_cache = True

    def __init__(self, cin: int, cout: int, blocks: int, temporal: bool, down: bool, frames: int = 3) -> None:
        super().__init__()
        self.avg_shortcut = AvgDown3D(cin, cout, 2 if temporal else 1, 2 if down else 1)
        layers: list[nn.Module] = []
        for _ in range(blocks):
            layers.append(ResidualBlock(cin, cout, frames))
            cin = cout
        if down:
            layers.append(Resample(cout, "downsample3d" if temporal else "downsample2d", frames=frames))
        self.downsamples = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor, cache: FrameCache) -> torch.Tensor:
        h = x
        for layer in self.downsamples:
            h = run(layer, h, cache)
        return h + self.avg_shortcut(x)


class UpResidualBlock(nn.Module):
    """A decoder level: residual blocks then (except the last level) a resample keeping the
    width, plus the duplicated input as shortcut when it upsamples (`upsamples.N`)."""

    takes_cache = True

    def __init__(self, cin: int, cout: int, blocks: int, temporal: bool, up: bool, frames: int = 3) -> None:
        super().__init__()
        self.avg_shortcut = DupUp3D(cin, cout, 2 if temporal else 1, 2) if up else None
        layers: list[nn.Module] = []
        width = cin
        for _ in range(blocks):
            layers.append(ResidualBlock(width, cout, frames))
            width = cout
        if up:
            layers.append(Resample(cout, "upsample3d" if temporal else "upsample2d", out_channels=cout, frames=frames))
        self.upsamples = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor, cache: FrameCache) -> torch.Tensor:
        h = x
        for layer in self.upsamples:
            h = run(layer, h, cache)
        if self.avg_shortcut is None:
            return h
        return h + self.avg_shortcut(x, first_chunk=cache.first)


def wan22_downsamples(config: WanVAEConfig) -> nn.Sequential:
    """`encoder.downsamples`: one `DownResidualBlock` per level."""
    dims = [config.dim * m for m in (1, *config.dim_mult)]
    last = len(config.dim_mult) - 1
    return nn.Sequential(*(
        DownResidualBlock(cin, cout, config.num_res_blocks, temporal=i < last and config.temporal_downsample[i],
                          down=i < last, frames=config.temporal_kernel)
        for i, (cin, cout) in enumerate(zip(dims[:-1], dims[1:]))))


def wan22_upsamples(config: WanVAEConfig) -> nn.Sequential:
    """`decoder.upsamples`: one `UpResidualBlock` per level, deepest first."""
    mult = config.dim_mult
    dims = [config.decoder_dim * m for m in (mult[-1], *reversed(mult))]
    temporal_up = tuple(reversed(config.temporal_downsample))
    last = len(mult) - 1
    return nn.Sequential(*(
        UpResidualBlock(cin, cout, config.num_res_blocks + 1, temporal=i < last and temporal_up[i], up=i < last,
                        frames=config.temporal_kernel)
        for i, (cin, cout) in enumerate(zip(dims[:-1], dims[1:]))))
