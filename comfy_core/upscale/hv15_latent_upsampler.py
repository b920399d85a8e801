"""HunyuanVideo 1.5's latent upscale networks (the `latent_upscale_models` folder), which
HunyuanVideo15LatentUpscaleWithModel runs on a latent already resized to the target size:

- the 1080p latent upsampler (`hunyuanvideo15_latent_upsampler_1080p`): a causal `conv_in` plus the
  latent repeated over channels, stages `up.N` of residual blocks (the VAE's: RMS norms, causal 3-D
  convolutions; no resampling), RMS norm, SiLU, causal `conv_out`;
- the 720p super-resolution model (`blocks.N.block.{0,2,4}`): `in_conv`, residual blocks of three
  causal convolutions with SiLU between, `out_conv`.

Behaviour of ComfyUI's `comfy/ldm/hunyuan_video/upsampler.py` (`Upsampler`, `SRModel3DV2`, the
configuration read from names and shapes as its LatentUpscaleModelLoader does: residual blocks per
stage are three, the 720p model has no global residual), written here. The files spell the 1080p
blocks' 1x1 shortcut `nin_shortcut.weight` (ComfyUI renames it to its wrapped convolution), read
as such. `build_*` are `comfy_core.upscale.latent_models` builders: `(tensors, metadata, dtype) ->
(network, config)`, raising `ValueError` for weights that do not fit.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.models.hunyuan_video15_vae import CausalConv3d, ResnetBlock, RMSNorm
from comfy_core.models.weight_shapes import numbered_children

UPSAMPLER_BLOCKS = 3  # ComfyUI's num_res_blocks 2, + 1 per stage


class HunyuanVideo15UpsamplerError(ValueError):
    """Latent upscale weights that do not form the network their names announce."""


@dataclass(frozen=True)
class UpsamplerConfig:
    z_channels: int
    out_channels: int
    block_out_channels: tuple[int, ...]


@dataclass(frozen=True)
class SRModelConfig:
    in_channels: int
    out_channels: int
    hidden_channels: int
    num_blocks: int


class LatentUpsampler1080p(nn.Module):
    def __init__(self, config: UpsamplerConfig) -> None:
        super().__init__()
        self.config = config
        ch = config.block_out_channels[0]
        self.repeats = ch // config.z_channels
        self.conv_in = CausalConv3d(config.z_channels, ch)
        self.up = nn.ModuleList()
        for width in config.block_out_channels:
            stage = nn.Module()
            stage.block = nn.ModuleList([ResnetBlock(ch if j == 0 else width, width) for j in range(UPSAMPLER_BLOCKS)])
            ch = width
            self.up.append(stage)
        self.norm_out = RMSNorm(ch)
        self.conv_out = CausalConv3d(ch, config.out_channels)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        # z [B, C, T, h, w] -> [B, out, T, h, w]
        x = self.conv_in(z) + z.repeat_interleave(self.repeats, dim=1)
        for stage in self.up:
            for block in stage.block:
                x = block(x)
        return self.conv_out(F.silu(self.norm_out(x)))


class _SRBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.block = nn.Sequential(CausalConv3d(channels, channels), nn.SiLU(), CausalConv3d(channels, channels),
                                   nn.SiLU(), CausalConv3d(channels, channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x)


class SRModel720p(nn.Module):
    def __init__(self, config: SRModelConfig) -> None:
        super().__init__()
        self.config = config
        self.in_conv = CausalConv3d(config.in_channels, config.hidden_channels)
        self.blocks = nn.ModuleList([_SRBlock(config.hidden_channels) for _ in range(config.num_blocks)])
        self.out_conv = CausalConv3d(config.hidden_channels, config.out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.in_conv(x)
        for block in self.blocks:
            y = block(y)
        return self.out_conv(y)


def _shape(tensors: Mapping[str, torch.Tensor], key: str, what: str) -> tuple[int, ...]:
    if key not in tensors:
        raise HunyuanVideo15UpsamplerError(f"{what}: {key!r} is missing")
    return tuple(tensors[key].shape)


def _load(module: nn.Module, state: Mapping[str, torch.Tensor], dtype: torch.dtype, what: str) -> nn.Module:
    expected = module.state_dict()
    missing, unexpected = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    if missing or unexpected:
        raise HunyuanVideo15UpsamplerError(f"{what}: missing {missing[:4]}, unexpected {unexpected[:4]}")
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise HunyuanVideo15UpsamplerError(f"{what}: {name} has shape {tuple(tensor.shape)}, the network's is "
                                               f"{tuple(expected[name].shape)}")
    module.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=True)
    return module.to(dtype).eval()


def build_upsampler_1080p(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str],
                          dtype: torch.dtype) -> tuple[nn.Module, UpsamplerConfig]:
    what = "HunyuanVideo 1.5 1080p latent upsampler"
    state = {name.replace("nin_shortcut.", "nin_shortcut.conv.", 1)
             if "nin_shortcut." in name and "nin_shortcut.conv." not in name else name: tensor
             for name, tensor in tensors.items()}
    stages = sorted(numbered_children(state, "up."))
    config = UpsamplerConfig(
        z_channels=_shape(state, "conv_in.conv.weight", what)[1],
        out_channels=_shape(state, "conv_out.conv.weight", what)[0],
        block_out_channels=tuple(_shape(state, f"up.{i}.block.0.conv1.conv.weight", what)[0] for i in stages))
    if config.block_out_channels[0] % config.z_channels:
        raise HunyuanVideo15UpsamplerError(f"{what}: {config.block_out_channels[0]} channels are no multiple of the "
                                           f"{config.z_channels} latent channels")
    return _load(LatentUpsampler1080p(config), state, dtype, what), config


def build_sr_720p(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str],
                  dtype: torch.dtype) -> tuple[nn.Module, SRModelConfig]:
    what = "HunyuanVideo 1.5 720p super-resolution model"
    in_weight = _shape(tensors, "in_conv.conv.weight", what)
    config = SRModelConfig(in_channels=in_weight[1], out_channels=_shape(tensors, "out_conv.conv.weight", what)[0],
                           hidden_channels=in_weight[0], num_blocks=len(numbered_children(tensors, "blocks.")))
    return _load(SRModel720p(config), dict(tensors), dtype, what), config


__all__ = ["HunyuanVideo15UpsamplerError", "build_sr_720p", "build_upsampler_1080p"]
