"""HunyuanVideo 1.5's causal video VAE (`hunyuanvideo15_vae_fp16.safetensors`): 32 latent channels, 16x
spatial and 4x temporal compression, the first frame on its own.

Architecture of Tencent's HunyuanVideo 1.5 VAE (diffusers' `AutoencoderKLHunyuanVideo15` computes the
same; ComfyUI runs it as `comfy/ldm/hunyuan_video/vae_refiner.py`'s Encoder / Decoder): causal 3-D
convolutions (replicate padding, two frames before, none after), RMS norms over channels
(`gamma * sqrt(C) * x / |x|`), residual blocks, one causal-in-time attention in the middle, and
down / up sampling that packs 2x2 (x2 in time after the first frame) into channels with an averaged
(resp. repeated) shortcut; the encoder's output adds a channel-group mean, the decoder's input a
channel repeat. Encoding keeps the distribution's mean (ComfyUI's regulariser without sampling).

Names are the released file's (ComfyUI's): `encoder.conv_in.conv`, `encoder.down.N.block.M.{norm1.gamma,
conv1.conv, norm2.gamma, conv2.conv, nin_shortcut.conv}`, `encoder.down.N.downsample.conv.conv`,
`encoder.mid.{block_1, attn_1.{norm.gamma, q, k, v, proj_out}, block_2}`, `encoder.norm_out.gamma`,
`encoder.conv_out.conv`; the decoder alike with `up.N.block.M` and `up.N.upsample`. Widths and depths
are read from the weights (`HunyuanVideo15VAEConfig.detect_from_weights`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.models.vae import VAEConfigError
from comfy_core.models.video_vae_surface import VideoVAESurface
from comfy_core.models.weight_shapes import numbered_children

MARKER = "decoder.up.0.upsample.conv.conv.weight"  # with 5-D `encoder.conv_in.conv.weight`
SPATIAL, TEMPORAL = 16, 4


@dataclass(frozen=True)
class HunyuanVideo15VAEConfig:
    block_out_channels: tuple[int, ...] = (128, 256, 512, 1024, 1024)
    latent_channels: int = 32
    layers_per_block: int = 2
    in_channels: int = 3
    out_channels: int = 3
    spatial_ratio: int = SPATIAL
    temporal_ratio: int = TEMPORAL

    def __post_init__(self) -> None:
        widest = self.block_out_channels[-1]
        if widest % (2 * self.latent_channels) or widest % self.latent_channels:
            raise VAEConfigError(f"HunyuanVideo 1.5 VAE: the widest level ({widest}) must be a multiple of twice the "
                                 f"{self.latent_channels} latent channels")

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "HunyuanVideo15VAEConfig":
        def shape(key: str) -> tuple[int, ...]:
            try:
                return tuple(tensors[prefix + key].shape)
            except KeyError:
                raise VAEConfigError(f"HunyuanVideo 1.5 VAE: key {prefix + key!r} is missing") from None

        levels = sorted(numbered_children(tensors, prefix + "encoder.down."))
        if not levels:
            raise VAEConfigError(f"HunyuanVideo 1.5 VAE: no {prefix}encoder.down.N blocks")
        widths = tuple(shape(f"encoder.down.{i}.block.0.conv1.conv.weight")[0] for i in levels)
        blocks = len(numbered_children(tensors, prefix + "encoder.down.0.block."))
        downsamplers = [i for i in levels if prefix + f"encoder.down.{i}.downsample.conv.conv.weight" in tensors]
        # A temporal downsampler packs 8 cells into channels (its convolution is 1/8 of the next width), a
        # spatial one 4.
        temporal = [i for i in downsamplers if i + 1 < len(widths)
                    and shape(f"encoder.down.{i}.downsample.conv.conv.weight")[0] * 8 == widths[i + 1]]
        return cls(block_out_channels=widths, latent_channels=shape("encoder.conv_out.conv.weight")[0] // 2,
                   layers_per_block=blocks, in_channels=shape("encoder.conv_in.conv.weight")[1],
                   out_channels=shape("decoder.conv_out.conv.weight")[0], spatial_ratio=2 ** len(downsamplers),
                   temporal_ratio=2 ** len(temporal))


class CausalConv3d(nn.Module):
    """A Conv3d (`conv`) after replicate padding: 1 each side in space, `k - 1` frames before."""

    def __init__(self, cin: int, cout: int, kernel: int = 3) -> None:
        super().__init__()
        self.pad = (kernel // 2, kernel // 2, kernel // 2, kernel // 2, kernel - 1, 0)
        self.conv = nn.Conv3d(cin, cout, kernel)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.pad(x, self.pad, mode="replicate"))


class PointConv3d(nn.Module):
    """A 1x1x1 Conv3d under `conv` (the residual shortcut)."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv = nn.Conv3d(cin, cout, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


class RMSNorm(nn.Module):
    """Channel RMS norm: `normalize(x, dim=1) * sqrt(C) * gamma` (float32 for half inputs)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.scale = dim ** 0.5
        self.gamma = nn.Parameter(torch.ones(dim, 1, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = F.normalize(x.float() if x.dtype in (torch.float16, torch.bfloat16) else x, dim=1).to(x.dtype)
        return normed * self.scale * self.gamma.to(x.dtype)


class ResnetBlock(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.norm1 = RMSNorm(cin)
        self.conv1 = CausalConv3d(cin, cout)
        self.norm2 = RMSNorm(cout)
        self.conv2 = CausalConv3d(cout, cout)
        self.nin_shortcut = PointConv3d(cin, cout) if cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv2(F.silu(self.norm2(self.conv1(F.silu(self.norm1(x))))))
        return h + (x if self.nin_shortcut is None else self.nin_shortcut(x))


class AttnBlock(nn.Module):
    """Single-head attention over all positions, each frame seeing itself and the frames before."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = RMSNorm(dim)
        self.q, self.k, self.v, self.proj_out = (nn.Conv3d(dim, dim, 1) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, t, h, w = x.shape
        normed = self.norm(x)
        q, k, v = (layer(normed).reshape(b, 1, c, t * h * w).transpose(-1, -2) for layer in (self.q, self.k, self.v))
        frame = torch.arange(t, device=x.device).repeat_interleave(h * w)  # [N]
        allowed = frame[None, :] <= frame[:, None]  # [N, N]: keys in this frame or before
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)  # [B, 1, N, C]
        return x + self.proj_out(out.transpose(-1, -2).reshape(b, c, t, h, w))


def _pack(x: torch.Tensor, r1: int) -> torch.Tensor:
    """`[B, C, r1 T, 2 H, 2 W] -> [B, r1 * 4 * C, T, H, W]` (the time / row / column phase first)."""
    b, c, f, h, w = x.shape
    x = x.reshape(b, c, f // r1, r1, h // 2, 2, w // 2, 2).permute(0, 3, 5, 7, 1, 2, 4, 6)
    return x.reshape(b, r1 * 4 * c, f // r1, h // 2, w // 2)


def _unpack(x: torch.Tensor, r1: int) -> torch.Tensor:
    """The inverse of `_pack`: `[B, r1 * 4 * C, T, H, W] -> [B, C, r1 T, 2 H, 2 W]`."""
    b, packed, f, h, w = x.shape
    c = packed // (r1 * 4)
    x = x.reshape(b, r1, 2, 2, c, f, h, w).permute(0, 4, 5, 1, 6, 2, 7, 3)
    return x.reshape(b, c, f * r1, h * 2, w * 2)


class Downsample(nn.Module):
    """Halves the sides (and the frames after the first, `temporal`): convolution then packing, plus
    the packed input averaged over channel groups."""

    def __init__(self, cin: int, cout: int, temporal: bool) -> None:
        super().__init__()
        self.temporal = temporal
        factor = 8 if temporal else 4
        self.conv = CausalConv3d(cin, cout // factor)
        self.group = factor * cin // cout

    def _mean(self, packed: torch.Tensor, channels: int, group: int) -> torch.Tensor:
        b, _, t, h, w = packed.shape
        return packed.reshape(b, channels, group, t, h, w).mean(dim=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x)
        if not self.temporal:
            packed = _pack(h, 1)
            return packed + self._mean(_pack(x, 1), packed.shape[1], self.group)
        first = _pack(h[:, :, :1], 1)
        first = torch.cat([first, first], dim=1)
        rest = _pack(h[:, :, 1:], 2)
        out = torch.cat([first, rest], dim=2)
        shortcut = torch.cat([self._mean(_pack(x[:, :, :1], 1), out.shape[1], self.group // 2),
                              self._mean(_pack(x[:, :, 1:], 2), out.shape[1], self.group)], dim=2)
        return out + shortcut


class Upsample(nn.Module):
    """Doubles the sides (and the frames after the first, `temporal`): convolution then unpacking,
    plus the input repeated over channels and unpacked."""

    def __init__(self, cin: int, cout: int, temporal: bool) -> None:
        super().__init__()
        self.temporal = temporal
        factor = 8 if temporal else 4
        self.conv = CausalConv3d(cin, cout * factor)
        self.repeats = factor * cout // cin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x)
        if not self.temporal:
            return _unpack(h, 1) + _unpack(x.repeat_interleave(self.repeats, dim=1), 1)
        first = _unpack(h[:, :, :1], 1)
        first = first[:, :first.shape[1] // 2]
        out = torch.cat([first, _unpack(h[:, :, 1:], 2)], dim=2)
        shortcut = torch.cat([_unpack(x[:, :, :1], 1).repeat_interleave(self.repeats // 2, dim=1),
                              _unpack(x[:, :, 1:], 2).repeat_interleave(self.repeats, dim=1)], dim=2)
        return out + shortcut


class _Mid(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.block_1 = ResnetBlock(dim, dim)
        self.attn_1 = AttnBlock(dim)
        self.block_2 = ResnetBlock(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block_2(self.attn_1(self.block_1(x)))


class Encoder(nn.Module):
    def __init__(self, config: HunyuanVideo15VAEConfig) -> None:
        super().__init__()
        widths = config.block_out_channels
        self.latent_channels = config.latent_channels
        self.conv_in = CausalConv3d(config.in_channels, widths[0])
        depth = int(math.log2(config.spatial_ratio))
        first_temporal = int(math.log2(config.spatial_ratio // config.temporal_ratio))
        self.down = nn.ModuleList()
        ch = widths[0]
        for i, width in enumerate(widths):
            stage = nn.Module()
            stage.block = nn.ModuleList([ResnetBlock(ch if j == 0 else width, width)
                                         for j in range(config.layers_per_block)])
            ch = width
            if i < depth:
                nxt = widths[i + 1] if i + 1 < len(widths) else width
                stage.downsample = Downsample(ch, nxt, temporal=i >= first_temporal)
                ch = nxt
            self.down.append(stage)
        self.mid = _Mid(ch)
        self.norm_out = RMSNorm(ch)
        self.conv_out = CausalConv3d(ch, 2 * config.latent_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv_in(x)
        for stage in self.down:
            for block in stage.block:
                x = block(x)
            if hasattr(stage, "downsample"):
                x = stage.downsample(x)
        x = self.mid(x)
        b, c, t, h, w = x.shape
        group = c // (2 * self.latent_channels)
        skip = x.reshape(b, c // group, group, t, h, w).mean(dim=2)
        return self.conv_out(F.silu(self.norm_out(x))) + skip  # [B, 2 * latent, T', h, w]


class Decoder(nn.Module):
    def __init__(self, config: HunyuanVideo15VAEConfig) -> None:
        super().__init__()
        widths = tuple(reversed(config.block_out_channels))
        self.repeat = widths[0] // config.latent_channels
        self.conv_in = CausalConv3d(config.latent_channels, widths[0])
        self.mid = _Mid(widths[0])
        depth = int(math.log2(config.spatial_ratio))
        temporal_depth = int(math.log2(config.temporal_ratio))
        self.up = nn.ModuleList()
        ch = widths[0]
        for i, width in enumerate(widths):
            stage = nn.Module()
            stage.block = nn.ModuleList([ResnetBlock(ch if j == 0 else width, width)
                                         for j in range(config.layers_per_block + 1)])
            ch = width
            if i < depth:
                nxt = widths[i + 1] if i + 1 < len(widths) else width
                stage.upsample = Upsample(ch, nxt, temporal=i < temporal_depth)
                ch = nxt
            self.up.append(stage)
        self.norm_out = RMSNorm(ch)
        self.conv_out = CausalConv3d(ch, config.out_channels)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        x = self.conv_in(z) + z.repeat_interleave(self.repeat, dim=1)
        x = self.mid(x)
        for stage in self.up:
            for block in stage.block:
                x = block(x)
            if hasattr(stage, "upsample"):
                x = stage.upsample(x)
        return self.conv_out(F.silu(self.norm_out(x)))


class HunyuanVideo15VAE(VideoVAESurface):
    """The VAE with the video-VAE surface our `VaePatcher` reads (`encode_raw`, `decode_raw`,
    `downscale_ratio`, `temporal_ratio`, `latent_channels`, ...)."""

    label = "HunyuanVideo 1.5"
    timestep_conditioning = False

    def __init__(self, config: HunyuanVideo15VAEConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder = Encoder(config)
        self.decoder = Decoder(config)

    @property
    def out_channels(self) -> int:
        return self.config.out_channels

    def _dtype(self) -> torch.dtype:
        return self.encoder.conv_in.conv.weight.dtype

    def encode_raw(self, x: torch.Tensor) -> torch.Tensor:
        """`[B, 3, 4k + 1, H, W]` in -1..1 -> the latent mean `[B, 32, k + 1, H/16, W/16]`."""
        frames = x.shape[2]
        if (frames - 1) % self.temporal_ratio:
            raise VAEConfigError(f"HunyuanVideo 1.5 VAE.encode: {frames} frames; the VAE takes 1 + "
                                 f"{self.temporal_ratio} x n frames (1, 5, 9, ...)")
        f = self.downscale_ratio
        if x.shape[3] % f or x.shape[4] % f:
            raise VAEConfigError(f"HunyuanVideo 1.5 VAE.encode: frames {x.shape[4]}x{x.shape[3]} are not multiples "
                                 f"of {f}")
        moments = self.encoder(x.to(self._dtype()))
        return moments[:, :self.latent_channels]

    def decode_raw(self, z: torch.Tensor, output_device: torch.device | str | None = None,
                   **_: Any) -> torch.Tensor:
        """`[B, 32, T', h, w]` -> `[B, 3, 4 (T' - 1) + 1, 16 h, 16 w]` in about -1..1 (unclamped)."""
        out = self.decoder(z.to(self._dtype()))
        return out if output_device is None else out.to(output_device)

    def working_bytes(self, pixels: int, frames: int, dtype: torch.dtype) -> int:
        """Our estimate of a decode's working memory: the whole clip at the widest full-resolution
        level (the last up stage) holds about eight tensors of its width."""
        size = torch.empty((), dtype=dtype).element_size()
        channels = self.decoder.conv_out.conv.in_channels
        return int(8 * channels * frames * pixels * size + 3 * 4 * frames * pixels * size)


def is_hunyuan_video15_vae(names: Any, prefix: str = "") -> bool:
    """The file holds this VAE: the decoder's packed upsampler under a causal `conv` wrapper."""
    return prefix + MARKER in names and prefix + "encoder.down.0.block.0.norm1.gamma" in names
