"""UNet building blocks in the LDM layout: timestep embedding, ResBlock, Downsample, Upsample.

Architecture of Ho et al. 2020 ("Denoising Diffusion Probabilistic Models") as used by latent
diffusion (Rombach et al. 2022); parameter names follow the CompVis/Stability
`ldm/modules/diffusionmodules/openaimodel.py` layout so checkpoints load without renaming
(`in_layers.0/2`, `emb_layers.1`, `out_layers.0/3`, `skip_connection`, `op`, `conv`).

Constructors take ComfyUI's arguments (`comfy/ldm/modules/diffusionmodules/openaimodel.py`),
including `dtype`, `device` and `operations`: the namespace whose `Linear`, `Conv2d`,
`conv_nd`, `GroupNorm`, ... build the layers (node packs pass `comfy.ops` classes, e.g.
ComfyUI-GGUF's quantised layers). Without one the layers are torch.nn's with ComfyUI's per-layer
weight hooks (`TorchOperations`, comfy_core/models/layers.py).
"""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.models import layers


class TorchOperations:
    """The layer classes models are built from when no `operations` is given: torch.nn's, with
    ComfyUI's per-layer weight hooks (comfy_core/models/layers.py).

    Same attribute names as ComfyUI's `comfy.ops.disable_weight_init`, so any of those classes
    (or a pack's subclass of them) can stand in for this one."""

    Linear = layers.Linear
    Conv1d = layers.Conv1d
    Conv2d = layers.Conv2d
    Conv3d = layers.Conv3d
    GroupNorm = layers.GroupNorm
    LayerNorm = layers.LayerNorm
    ConvTranspose1d = layers.ConvTranspose1d
    ConvTranspose2d = layers.ConvTranspose2d
    Embedding = layers.Embedding

    @classmethod
    def conv_nd(cls, dims: int, *args: Any, **kwargs: Any) -> nn.Module:
        """A 2-D or 3-D convolution, as ComfyUI's `ops.conv_nd` (other ranks are an error there too)."""
        if dims == 2:
            return cls.Conv2d(*args, **kwargs)
        if dims == 3:
            return cls.Conv3d(*args, **kwargs)
        raise ValueError(f"unsupported dimensions: {dims}")


def operations_or_default(operations: Any) -> Any:
    return TorchOperations if operations is None else operations


def timestep_embedding(timesteps: torch.Tensor, dim: int, max_period: float = 10000.0,
                       repeat_only: bool = False) -> torch.Tensor:
    """Sinusoidal embedding of (possibly fractional) timesteps, `[B] -> [B, dim]`, cos half first.

    Vaswani et al. 2017 ("Attention Is All You Need") positional encoding, in the order the LDM
    UNet uses (`cat(cos, sin)`, frequencies `exp(-ln(max_period) * i / half)`). `repeat_only`
    (ComfyUI's argument) repeats the raw timestep `dim` times instead.
    """
    if repeat_only:
        return timesteps[:, None].expand(-1, dim)
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=timesteps.device) / half)
    args = timesteps[:, None].float() * freqs[None]  # [B, half]
    emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)  # [B, 2*half]
    if dim % 2:
        emb = torch.cat([emb, torch.zeros_like(emb[:, :1])], dim=-1)
    return emb


def group_norm(channels: int, eps: float = 1e-5, operations: Any = None, dtype: Any = None,
               device: Any = None) -> nn.Module:
    """The 32-group normalisation every LDM block uses."""
    return operations_or_default(operations).GroupNorm(32, channels, eps=eps, dtype=dtype, device=device)


def avg_pool_nd(dims: int, *args: Any, **kwargs: Any) -> nn.Module:
    """1-, 2- or 3-D average pooling (ComfyUI's `diffusionmodules.util.avg_pool_nd`)."""
    pools = {1: nn.AvgPool1d, 2: nn.AvgPool2d, 3: nn.AvgPool3d}
    if dims not in pools:
        raise ValueError(f"unsupported dimensions: {dims}")
    return pools[dims](*args, **kwargs)


class TimestepBlock(nn.Module):
    """A module whose `forward(x, emb)` takes the timestep embedding as second argument
    (ComfyUI's marker class: `forward_timestep_embed` feeds `emb` to every instance)."""

    def forward(self, x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError(f"{type(self).__name__} must define forward(x, emb)")


class ResBlock(TimestepBlock):
    """`skip(x) + f(x, emb)` with the timestep embedding added between the two convolutions.

    ComfyUI's arguments: `use_scale_shift_norm` (FiLM-style `norm(h) * (1 + scale) + shift`),
    `use_conv` (a full-kernel skip convolution instead of 1x1), `dims` (2 or 3), `up`/`down`
    (resample both branches), `kernel_size`, `exchange_temb_dims` (the embedding's frame axis
    moved next to the channels, for 3-D blocks), `skip_t_emb` (no embedding). SD1/SD2/SDXL use
    the defaults."""

    def __init__(self, channels: int, emb_channels: int, dropout: float = 0.0, out_channels: int | None = None,
                 use_conv: bool = False, use_scale_shift_norm: bool = False, dims: int = 2,
                 use_checkpoint: bool = False, up: bool = False, down: bool = False,
                 kernel_size: int | list[int] = 3, exchange_temb_dims: bool = False, skip_t_emb: bool = False,
                 dtype: Any = None, device: Any = None, operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        self.channels = channels
        self.emb_channels = emb_channels
        self.dropout = dropout
        self.out_channels = out_channels or channels
        self.use_conv = use_conv
        self.use_checkpoint = use_checkpoint  # accepted for ComfyUI's signature; inference only here
        self.use_scale_shift_norm = use_scale_shift_norm
        self.exchange_temb_dims = exchange_temb_dims and not skip_t_emb
        self.skip_t_emb = skip_t_emb
        out = self.out_channels
        padding: Any = [k // 2 for k in kernel_size] if isinstance(kernel_size, (list, tuple)) else kernel_size // 2
        factory = {"dtype": dtype, "device": device}
        self.in_layers = nn.Sequential(ops.GroupNorm(32, channels, **factory), nn.SiLU(),
                                       ops.conv_nd(dims, channels, out, kernel_size, padding=padding, **factory))
        self.updown = up or down
        if up:
            self.h_upd: nn.Module = Upsample(channels, False, dims)
            self.x_upd: nn.Module = Upsample(channels, False, dims)
        elif down:
            self.h_upd = Downsample(channels, False, dims)
            self.x_upd = Downsample(channels, False, dims)
        else:
            self.h_upd = self.x_upd = nn.Identity()
        self.emb_layers = None if skip_t_emb else nn.Sequential(
            nn.SiLU(), ops.Linear(emb_channels, 2 * out if use_scale_shift_norm else out, **factory))
        self.out_layers = nn.Sequential(ops.GroupNorm(32, out, **factory), nn.SiLU(), nn.Dropout(p=dropout),
                                        ops.conv_nd(dims, out, out, kernel_size, padding=padding, **factory))
        if out == channels:
            self.skip_connection: nn.Module = nn.Identity()
        elif use_conv:
            self.skip_connection = ops.conv_nd(dims, channels, out, kernel_size, padding=padding, **factory)
        else:
            self.skip_connection = ops.conv_nd(dims, channels, out, 1, **factory)

    def forward(self, x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        # x [B, C, (T,) H, W], emb [B, E] (or [B, T, E] with exchange_temb_dims)
        if self.updown:
            h = self.in_layers[:-1](x)
            h = self.in_layers[-1](self.h_upd(h))
            x = self.x_upd(x)
        else:
            h = self.in_layers(x)  # [B, C', H, W]
        emb_out = None
        if self.emb_layers is not None:
            emb_out = self.emb_layers(emb).to(h.dtype)
            if self.exchange_temb_dims:
                emb_out = emb_out.movedim(1, 2)
            while emb_out.dim() < h.dim():
                emb_out = emb_out[..., None]
        if self.use_scale_shift_norm:
            h = self.out_layers[0](h)
            if emb_out is not None:
                scale, shift = emb_out.chunk(2, dim=1)
                h = h * (1 + scale) + shift
            h = self.out_layers[1:](h)
        else:
            if emb_out is not None:
                h = h + emb_out
            h = self.out_layers(h)
        return self.skip_connection(x) + h


class Downsample(nn.Module):
    """Stride-2 3x3 convolution (parameter `op`), or average pooling without `use_conv`; 3-D
    signals are downsampled in their two inner dimensions only."""

    def __init__(self, channels: int, use_conv: bool = True, dims: int = 2, out_channels: int | None = None,
                 padding: int = 1, dtype: Any = None, device: Any = None, operations: Any = None) -> None:
        super().__init__()
        self.channels = channels
        self.out_channels = out_channels or channels
        self.use_conv = use_conv
        self.dims = dims
        stride: Any = 2 if dims != 3 else (1, 2, 2)
        if use_conv:
            self.op = operations_or_default(operations).conv_nd(
                dims, channels, self.out_channels, 3, stride=stride, padding=padding, dtype=dtype, device=device)
        else:
            if channels != self.out_channels:
                raise ValueError(f"Downsample without a convolution keeps the channels ({channels} != {self.out_channels})")
            self.op = avg_pool_nd(dims, kernel_size=stride, stride=stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.op(x)


class Upsample(nn.Module):
    """Nearest-neighbour 2x upsampling (of the two inner dimensions) then, with `use_conv`, a
    3x3 convolution (parameter `conv`).

    `output_shape` (the matching skip tensor's shape) makes odd latent sizes round-trip, as the
    LDM code does when it is given the skip's size.
    """

    def __init__(self, channels: int, use_conv: bool = True, dims: int = 2, out_channels: int | None = None,
                 padding: int = 1, dtype: Any = None, device: Any = None, operations: Any = None) -> None:
        super().__init__()
        self.channels = channels
        self.out_channels = out_channels or channels
        self.use_conv = use_conv
        self.dims = dims
        if use_conv:
            self.conv = operations_or_default(operations).conv_nd(
                dims, channels, self.out_channels, 3, padding=padding, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor, output_shape: Any = None) -> torch.Tensor:
        if self.dims == 3:
            size = [x.shape[2], x.shape[3] * 2, x.shape[4] * 2]
            if output_shape is not None:
                size[1:] = [output_shape[3], output_shape[4]]
        else:
            size = [x.shape[2] * 2, x.shape[3] * 2]
            if output_shape is not None:
                size = [output_shape[2], output_shape[3]]
        x = F.interpolate(x, size=size, mode="nearest")
        return self.conv(x) if self.use_conv else x
