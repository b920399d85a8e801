"""The CogVideoX VAE (Yang et al. 2024, "CogVideoX", section 2.1: a 3-D causal VAE, 8x spatial and
4x temporal compression, 16 latent channels), as diffusers' `AutoencoderKLCogVideoX` and ComfyUI's
`comfy/ldm/cogvideo/vae.py` run it (behaviour learnt from both; written here). Files use diffusers'
names (`cogvideox_vae.safetensors` of the VOID release).

- Causal 3-D convolutions: time padded at the front with copies of the first frame (kernel - 1 of
  them) or, inside a long video, with the previous chunk's last frames (the "conv cache"); rows and
  columns zero-padded. GroupNorm (32 groups) over channels x frames x rows x columns.
- Encoder: `conv_in`, down blocks of resnets, each but the last ending in a 2-D stride-2
  convolution (padded right / bottom by one); the first log2(4) = 2 also halve time by averaging
  pairs of frames after the first. Mid block (two resnets), norm, SiLU, `conv_out` to mean and
  log-variance; the latent is the mean. Videos are encoded in chunks of 8 frames (the first chunk
  takes the remainder), the conv cache carried across.
- Decoder: resnets normalised by spatial norms conditioned on the latent (`norm * conv_y(zq) +
  conv_b(zq)`, zq resized nearest to the features, the first frame apart), up blocks with nearest
  2x upsampling (time too in the first two, the first frame kept single) and a 3x3 convolution.
  Latents are decoded two frames at a time (the first chunk takes the remainder).
- Frames: `1 + 4k` pixel frames <-> `1 + k` latent frames.

The layout (widths, blocks, layers, channels) is read from the weights.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.models.vae import VAEConfigError
from comfy_core.models.video_vae_surface import VideoVAESurface

MARKER = "decoder.norm_out.conv_y.conv.weight"
ENCODE_FRAMES = 8  # pixel frames per encoder chunk
DECODE_FRAMES = 2  # latent frames per decoder chunk
TEMPORAL_LEVELS = 2  # log2 of the 4x temporal compression


def is_cogvideox_vae(tensors: Mapping[str, Any], prefix: str = "") -> bool:
    return (prefix + MARKER in tensors
            and prefix + "encoder.down_blocks.0.resnets.0.conv1.conv.weight" in tensors)


@dataclass(frozen=True)
class CogVideoXVAEConfig:
    block_out_channels: tuple[int, ...] = (128, 256, 256, 512)
    layers_per_block: int = 3
    latent_channels: int = 16
    in_channels: int = 3
    groups: int = 32  # not in the weights: CogVideoX's 32
    use_quant_conv: bool = False
    use_post_quant_conv: bool = False
    spatial_ratio: int = 8
    temporal_ratio: int = 4

    @property
    def downscale(self) -> int:
        return self.spatial_ratio

    @property
    def embed_dim(self) -> int:
        return self.latent_channels

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "CogVideoXVAEConfig":
        def shape(name: str) -> tuple[int, ...]:
            if prefix + name not in tensors:
                raise VAEConfigError(f"CogVideoX VAE: missing {prefix}{name}")
            return tuple(tensors[prefix + name].shape)

        widths, i = [], 0
        while prefix + f"encoder.down_blocks.{i}.resnets.0.conv1.conv.weight" in tensors:
            widths.append(shape(f"encoder.down_blocks.{i}.resnets.0.conv1.conv.weight")[0])
            i += 1
        if not widths:
            raise VAEConfigError(f"CogVideoX VAE: no {prefix}encoder.down_blocks.N")
        layers = 0
        while prefix + f"encoder.down_blocks.0.resnets.{layers}.conv1.conv.weight" in tensors:
            layers += 1
        latent = shape("decoder.conv_in.conv.weight")[1]
        if shape("encoder.conv_out.conv.weight")[0] != 2 * latent:
            raise VAEConfigError("CogVideoX VAE: the encoder's conv_out is not 2 x the latent channels")
        return cls(block_out_channels=tuple(widths), layers_per_block=layers, latent_channels=latent,
                   in_channels=shape("encoder.conv_in.conv.weight")[1],
                   use_quant_conv=prefix + "quant_conv.weight" in tensors,
                   use_post_quant_conv=prefix + "post_quant_conv.weight" in tensors,
                   spatial_ratio=2 ** (len(widths) - 1))


Cache = dict[str, Any]


class CausalConv3d(nn.Module):
    """A 3-D convolution causal in time (see the module docstring); `forward(x, cache) -> (y, cache)`."""

    def __init__(self, cin: int, cout: int, kernel: int = 3) -> None:
        super().__init__()
        self.time_kernel = kernel
        self.conv = nn.Conv3d(cin, cout, kernel, padding=(0, (kernel - 1) // 2, (kernel - 1) // 2))

    def forward(self, x: torch.Tensor, cache: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        k = self.time_kernel
        if k > 1:
            front = cache if cache is not None else x[:, :, :1].expand(-1, -1, k - 1, -1, -1)
            x = torch.cat([front.to(x.dtype), x], dim=2)
            cache = x[:, :, -(k - 1):].clone()
        return self.conv(x), cache


class SpatialNorm(nn.Module):
    """GroupNorm of the features scaled and shifted by 1x1x1 convolutions of the latent `zq`."""

    def __init__(self, channels: int, zq_channels: int, groups: int) -> None:
        super().__init__()
        self.norm_layer = nn.GroupNorm(groups, channels, eps=1e-6)
        self.conv_y = CausalConv3d(zq_channels, channels, 1)
        self.conv_b = CausalConv3d(zq_channels, channels, 1)

    def forward(self, f: torch.Tensor, zq: torch.Tensor, cache: Cache) -> tuple[torch.Tensor, Cache]:
        if f.shape[2] > 1 and f.shape[2] % 2 == 1:  # the first frame resized on its own
            zq = torch.cat([F.interpolate(zq[:, :, :1], size=(1, *f.shape[-2:])),
                            F.interpolate(zq[:, :, 1:], size=(f.shape[2] - 1, *f.shape[-2:]))], dim=2)
        else:
            zq = F.interpolate(zq, size=f.shape[-3:])
        y, _ = self.conv_y(zq)
        b, _ = self.conv_b(zq)
        return self.norm_layer(f) * y + b, {}


class ResnetBlock(nn.Module):
    def __init__(self, cin: int, cout: int, groups: int, zq_channels: int | None = None) -> None:
        super().__init__()
        if zq_channels is None:
            self.norm1, self.norm2 = nn.GroupNorm(groups, cin, eps=1e-6), nn.GroupNorm(groups, cout, eps=1e-6)
        else:
            self.norm1, self.norm2 = SpatialNorm(cin, zq_channels, groups), SpatialNorm(cout, zq_channels, groups)
        self.conv1 = CausalConv3d(cin, cout)
        self.conv2 = CausalConv3d(cout, cout)
        if cin != cout:
            self.conv_shortcut = nn.Conv3d(cin, cout, 1)

    def _norm(self, norm: nn.Module, x: torch.Tensor, zq: torch.Tensor | None) -> torch.Tensor:
        return norm(x, zq, {})[0] if zq is not None else norm(x)

    def forward(self, x: torch.Tensor, zq: torch.Tensor | None, cache: Cache) -> tuple[torch.Tensor, Cache]:
        new: Cache = {}
        h = F.silu(self._norm(self.norm1, x, zq))
        h, new["conv1"] = self.conv1(h, cache.get("conv1"))
        h = F.silu(self._norm(self.norm2, h, zq))
        h, new["conv2"] = self.conv2(h, cache.get("conv2"))
        if hasattr(self, "conv_shortcut"):
            x = self.conv_shortcut(x)
        return x + h, new


def _per_frame(conv: nn.Module, x: torch.Tensor) -> torch.Tensor:
    b, c, t, h, w = x.shape
    y = conv(x.permute(0, 2, 1, 3, 4).reshape(b * t, c, h, w))
    return y.reshape(b, t, *y.shape[1:]).permute(0, 2, 1, 3, 4)


class Downsample(nn.Module):
    def __init__(self, channels: int, compress_time: bool) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, stride=2)
        self.compress_time = compress_time

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.compress_time and x.shape[2] > 1:
            first, rest = (x[:, :, :1], x[:, :, 1:]) if x.shape[2] % 2 else (x[:, :, :0], x)
            if rest.shape[2] > 0:  # average frame pairs along time
                rest = rest.unflatten(2, (-1, 2)).mean(dim=3)
            x = torch.cat([first, rest], dim=2)
        return _per_frame(self.conv, F.pad(x, (0, 1, 0, 1)))


class Upsample(nn.Module):
    def __init__(self, channels: int, compress_time: bool) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.compress_time = compress_time

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[2]
        if self.compress_time and t > 1 and t % 2 == 1:
            first = F.interpolate(x[:, :, 0], scale_factor=2.0)[:, :, None]
            x = torch.cat([first, F.interpolate(x[:, :, 1:], scale_factor=2.0)], dim=2)
        elif self.compress_time and t > 1:
            x = F.interpolate(x, scale_factor=2.0)
        else:
            x = F.interpolate(x, scale_factor=(1.0, 2.0, 2.0))
        return _per_frame(self.conv, x)


class Block(nn.Module):
    """A down block (`downsamplers`) or an up block (`upsamplers`) of resnets."""

    def __init__(self, cin: int, cout: int, layers: int, groups: int, resample: str | None, compress_time: bool,
                 zq_channels: int | None = None) -> None:
        super().__init__()
        self.resnets = nn.ModuleList([ResnetBlock(cin if i == 0 else cout, cout, groups, zq_channels)
                                      for i in range(layers)])
        if resample == "down":
            self.downsamplers = nn.ModuleList([Downsample(cout, compress_time)])
        elif resample == "up":
            self.upsamplers = nn.ModuleList([Upsample(cout, compress_time)])

    def forward(self, x: torch.Tensor, zq: torch.Tensor | None, cache: Cache) -> tuple[torch.Tensor, Cache]:
        new: Cache = {}
        for i, resnet in enumerate(self.resnets):
            x, new[f"resnet_{i}"] = resnet(x, zq, cache.get(f"resnet_{i}", {}))
        for sampler in list(getattr(self, "downsamplers", [])) + list(getattr(self, "upsamplers", [])):
            x = sampler(x)
        return x, new


class Encoder(nn.Module):
    def __init__(self, config: CogVideoXVAEConfig) -> None:
        super().__init__()
        widths, g = config.block_out_channels, config.groups
        self.conv_in = CausalConv3d(config.in_channels, widths[0])
        self.down_blocks = nn.ModuleList([
            Block(widths[max(i - 1, 0)], widths[i], config.layers_per_block, g,
                  "down" if i < len(widths) - 1 else None, i < TEMPORAL_LEVELS) for i in range(len(widths))])
        self.mid_block = Block(widths[-1], widths[-1], 2, g, None, False)
        self.norm_out = nn.GroupNorm(g, widths[-1], eps=1e-6)
        self.conv_out = CausalConv3d(widths[-1], 2 * config.latent_channels)

    def forward(self, x: torch.Tensor, cache: Cache) -> tuple[torch.Tensor, Cache]:
        new: Cache = {}
        x, new["conv_in"] = self.conv_in(x, cache.get("conv_in"))
        for i, block in enumerate(self.down_blocks):
            x, new[f"down_{i}"] = block(x, None, cache.get(f"down_{i}", {}))
        x, new["mid"] = self.mid_block(x, None, cache.get("mid", {}))
        x, new["conv_out"] = self.conv_out(F.silu(self.norm_out(x)), cache.get("conv_out"))
        return x, new


class Decoder(nn.Module):
    def __init__(self, config: CogVideoXVAEConfig) -> None:
        super().__init__()
        widths, g, z = tuple(reversed(config.block_out_channels)), config.groups, config.latent_channels
        self.conv_in = CausalConv3d(z, widths[0])
        self.mid_block = Block(widths[0], widths[0], 2, g, None, False, z)
        self.up_blocks = nn.ModuleList([
            Block(widths[max(i - 1, 0)], widths[i], config.layers_per_block + 1, g,
                  "up" if i < len(widths) - 1 else None, i < TEMPORAL_LEVELS, z) for i in range(len(widths))])
        self.norm_out = SpatialNorm(widths[-1], z, g)
        self.conv_out = CausalConv3d(widths[-1], config.in_channels)

    def forward(self, z: torch.Tensor, cache: Cache) -> tuple[torch.Tensor, Cache]:
        new: Cache = {}
        x, new["conv_in"] = self.conv_in(z, cache.get("conv_in"))
        x, new["mid"] = self.mid_block(x, z, cache.get("mid", {}))
        for i, block in enumerate(self.up_blocks):
            x, new[f"up_{i}"] = block(x, z, cache.get(f"up_{i}", {}))
        x = F.silu(self.norm_out(x, z, {})[0])
        x, new["conv_out"] = self.conv_out(x, cache.get("conv_out"))
        return x, new


def _chunks(frames: int, size: int) -> list[tuple[int, int]]:
    """CogVideoX's chunking: `frames // size` chunks of `size`, the first one longer by the remainder."""
    count, rest = max(frames // size, 1), frames % size
    return [(0 if i == 0 else size * i + rest, size * (i + 1) + rest) for i in range(count)]


class CogVideoXVAE(VideoVAESurface):
    """The CogVideoX VAE with the video-VAE surface our `VaePatcher` reads."""

    label = "CogVideoX"

    def __init__(self, config: CogVideoXVAEConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder = Encoder(config)
        self.decoder = Decoder(config)
        if config.use_quant_conv:
            self.quant_conv = nn.Conv3d(2 * config.latent_channels, 2 * config.latent_channels, 1)
        if config.use_post_quant_conv:
            self.post_quant_conv = nn.Conv3d(config.latent_channels, config.latent_channels, 1)

    @property
    def out_channels(self) -> int:
        return self.config.in_channels

    def _dtype(self) -> torch.dtype:
        return self.encoder.conv_in.conv.weight.dtype

    def working_bytes(self, pixels: int, frames: int, dtype: torch.dtype) -> int:
        """Our estimate of the peak working memory for `frames` frames of `pixels` pixels: one chunk
        (8 pixel frames, or the 8 a 2-frame latent chunk decodes to, plus the 2 cached ones) of the
        widest full-resolution level, about five copies of it alive in a resnet."""
        size = torch.empty((), dtype=dtype).element_size()
        chunk = min(max(frames, 1), ENCODE_FRAMES + 2)
        return int(5 * self.config.block_out_channels[0] * pixels * chunk * size)

    def encode_raw(self, x: torch.Tensor) -> torch.Tensor:
        """`[B, 3, 1 + 4k, H, W]` in -1..1 -> the latent mean `[B, 16, 1 + k, H/8, W/8]` (extra frames
        past `1 + 4k` are dropped)."""
        frames = 1 + ((x.shape[2] - 1) // self.config.temporal_ratio) * self.config.temporal_ratio
        x = x[:, :, :max(frames, 1)].to(self._dtype())
        cache: Cache = {}
        out = []
        for start, end in _chunks(x.shape[2], ENCODE_FRAMES):
            h, cache = self.encoder(x[:, :, start:end], cache)
            if self.config.use_quant_conv:
                h = self.quant_conv(h)
            out.append(h)
        return torch.cat(out, dim=2)[:, :self.config.latent_channels]

    def decode_raw(self, z: torch.Tensor, output_device: torch.device | str | None = None, **_: Any) -> torch.Tensor:
        """`[B, 16, 1 + k, h, w]` -> `[B, 3, 1 + 4k, 8h, 8w]` in about -1..1 (each decoded chunk moved to
        `output_device` as it comes)."""
        z = z.to(self._dtype())
        cache: Cache = {}
        out = []
        for start, end in _chunks(z.shape[2], DECODE_FRAMES):
            chunk = z[:, :, start:end]
            if self.config.use_post_quant_conv:
                chunk = self.post_quant_conv(chunk)
            h, cache = self.decoder(chunk, cache)
            out.append(h if output_device is None else h.to(output_device))
        return torch.cat(out, dim=2)
