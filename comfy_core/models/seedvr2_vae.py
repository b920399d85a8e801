"""SeedVR2's causal video VAE (ByteDance's `video_vae_v3` "s8_c16_t4_inflation_sd3"), as today's
ComfyUI runs it (comfy/ldm/seedvr/vae.py: `VideoAutoencoderKLWrapper`).

An SD3-style autoencoder inflated to 3-D: 16 latent channels at 8x spatial and 4x temporal
compression (4n + 1 frames <-> n + 1 latent frames), encoder blocks 128 / 256 / 512 / 512 with two
residual blocks each, decoder blocks with three; a mid block of residual, per-frame self-attention
(one head over the frame's cells) and residual, at both ends.

- Causality: every convolution pads time on the front only, by repeating the first frame twice its
  temporal padding (ByteDance's `extend_head`); spatially it pads with zeros. Group norms (32
  groups, eps 1e-6) normalise each frame on its own, so the whole is causal frame by frame.
  ComfyUI streams long clips through the convolutions' carried "memory"; that gives the same
  result as this one pass over the clip.
- Encoder down-sampling: zero padding on the right / bottom, then a 3x3 (3x3x3 where the block
  also halves time: blocks 1 and 2) convolution of stride 2 with no spatial padding.
- Decoder up-sampling (MAGViT-v2's): a 1x1x1 convolution to 4 (8 with time) times the channels,
  rearranged into 2x2 (2x2x2) cells, the duplicated copy of the first frame dropped where time
  doubles (up blocks 0 and 1), then a 3x3x3 causal convolution.
- Scaling: the latent is the posterior mean times 0.9152 (ByteDance's `scaling_factor`); decoding
  divides by it first. The DiT's latent format therefore has scale 1.

The module has the video-VAE surface `comfy_core.patching.vae.VaePatcher` reads (`encode_raw`,
`decode_raw`, `encode`, `decode`, `latent_dim` 3, `downscale_ratio`, `temporal_ratio`, ...).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.models.vae import VAEConfigError
from comfy_core.models.video_vae_surface import VideoVAESurface

MARKER = "decoder.up_blocks.2.upsamplers.0.upscale_conv.weight"  # ComfyUI's detection key
SCALING_FACTOR = 0.9152
SHIFTING_FACTOR = 0.0
GROUPS = 32
EPS = 1e-6


@dataclass(frozen=True)
class SeedVR2VAEConfig:
    block_out_channels: tuple[int, ...] = (128, 256, 512, 512)
    layers_per_block: int = 2
    latent_channels: int = 16
    temporal_down: tuple[bool, ...] = (False, True, True)  # per encoder down-sampler
    temporal_up: tuple[bool, ...] = (True, True, False)  # per decoder up-sampler

    @property
    def spatial_ratio(self) -> int:
        return 2 ** (len(self.block_out_channels) - 1)

    @property
    def temporal_ratio(self) -> int:
        return 2 ** sum(self.temporal_down)

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "SeedVR2VAEConfig":
        def shape(name: str) -> tuple[int, ...]:
            if prefix + name not in tensors:
                raise VAEConfigError(f"SeedVR2 VAE: no {prefix}{name}")
            return tuple(tensors[prefix + name].shape)

        channels = []
        while f"{prefix}encoder.down_blocks.{len(channels)}.resnets.0.conv1.weight" in tensors:
            channels.append(shape(f"encoder.down_blocks.{len(channels)}.resnets.0.conv1.weight")[0])
        if len(channels) < 2:
            raise VAEConfigError("SeedVR2 VAE: fewer than two encoder down blocks")
        layers = 0
        while f"{prefix}encoder.down_blocks.0.resnets.{layers}.conv1.weight" in tensors:
            layers += 1
        down = tuple(shape(f"encoder.down_blocks.{i}.downsamplers.0.conv.weight")[2] == 3
                     for i in range(len(channels) - 1))
        up = []
        for i in range(len(channels) - 1):
            out, inp = shape(f"decoder.up_blocks.{i}.upsamplers.0.upscale_conv.weight")[:2]
            up.append(out == 8 * inp)
        latent = shape("decoder.conv_in.weight")[1]
        for c in channels:
            if c % GROUPS:
                raise VAEConfigError(f"SeedVR2 VAE: {c} channels do not split into {GROUPS} groups")
        return cls(block_out_channels=tuple(channels), layers_per_block=layers, latent_channels=latent,
                   temporal_down=down, temporal_up=tuple(up))


def is_seedvr2_vae(names: Any, prefix: str = "") -> bool:
    """ComfyUI's test: the decoder's third up block has a MAGViT-style `upscale_conv`."""
    return prefix + MARKER in names


# --- layers ---------------------------------------------------------------------------------------

class CausalConv3d(nn.Conv3d):
    """A 3-D convolution padded causally in time (the first frame repeated 2 x `padding[0]` times in
    front, nothing behind) and with zeros in space."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0) -> None:
        kernel = (kernel_size,) * 3 if isinstance(kernel_size, int) else tuple(kernel_size)
        pad = (padding,) * 3 if isinstance(padding, int) else tuple(padding)
        super().__init__(in_channels, out_channels, kernel, stride=stride, padding=(0, pad[1], pad[2]))
        self.time_padding = pad[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.time_padding:
            x = torch.cat([x[:, :, :1]] * (2 * self.time_padding) + [x], dim=2)
        return super().forward(x)


def frame_group_norm(norm: nn.GroupNorm, x: torch.Tensor) -> torch.Tensor:
    """A group norm of each frame on its own: x `[B, C, T, H, W]`."""
    b, c, t, h, w = x.shape
    frames = x.transpose(1, 2).reshape(b * t, c, h, w)
    return norm(frames).reshape(b, t, c, h, w).transpose(1, 2)


class ResnetBlock3D(nn.Module):
    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(GROUPS, in_channels, eps=EPS)
        self.conv1 = CausalConv3d(in_channels, out_channels, 3, padding=1)
        self.norm2 = nn.GroupNorm(GROUPS, out_channels, eps=EPS)
        self.conv2 = CausalConv3d(out_channels, out_channels, 3, padding=1)
        self.conv_shortcut = CausalConv3d(in_channels, out_channels, 1) if in_channels != out_channels else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(frame_group_norm(self.norm1, x)))
        h = self.conv2(F.silu(frame_group_norm(self.norm2, h)))
        return (x if self.conv_shortcut is None else self.conv_shortcut(x)) + h


class FrameAttention(nn.Module):
    """One-head self-attention over each frame's cells (diffusers' `Attention` names), residual."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.group_norm = nn.GroupNorm(GROUPS, channels, eps=EPS)
        self.to_q = nn.Linear(channels, channels)
        self.to_k = nn.Linear(channels, channels)
        self.to_v = nn.Linear(channels, channels)
        self.to_out = nn.ModuleList([nn.Linear(channels, channels)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, t, h, w = x.shape
        frames = x.transpose(1, 2).reshape(b * t, c, h * w)
        tokens = self.group_norm(frames).transpose(1, 2)  # [bt, hw, c]
        q, k, v = self.to_q(tokens), self.to_k(tokens), self.to_v(tokens)
        out = F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None])[:, 0]
        out = self.to_out[0](out).transpose(1, 2)  # [bt, c, hw]
        return x + out.reshape(b, t, c, h, w).transpose(1, 2)


class MidBlock3D(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.resnets = nn.ModuleList([ResnetBlock3D(channels, channels), ResnetBlock3D(channels, channels)])
        self.attentions = nn.ModuleList([FrameAttention(channels)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.resnets[1](self.attentions[0](self.resnets[0](x)))


class Downsample3D(nn.Module):
    def __init__(self, channels: int, temporal: bool) -> None:
        super().__init__()
        self.temporal = temporal
        self.conv = CausalConv3d(channels, channels, (3 if temporal else 1, 3, 3), stride=(2 if temporal else 1, 2, 2),
                                 padding=(1 if temporal else 0, 0, 0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.pad(x, (0, 1, 0, 1)))


class Upsample3D(nn.Module):
    def __init__(self, channels: int, temporal: bool) -> None:
        super().__init__()
        self.temporal = temporal
        self.upscale_conv = nn.Conv3d(channels, channels * (8 if temporal else 4), 1)
        self.conv = CausalConv3d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, t, h, w = x.shape
        z = 2 if self.temporal else 1
        y = self.upscale_conv(x).view(b, 2, 2, z, c, t, h, w)  # channel index (x, y, z, c)
        y = y.permute(0, 4, 5, 3, 6, 1, 7, 2).reshape(b, c, t * z, h * 2, w * 2)
        if self.temporal:  # the first latent frame stands for one frame, not two
            y = torch.cat((y[:, :, :1], y[:, :, 2:]), dim=2)
        return self.conv(y)


class _DownBlock(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, layers: int, down: bool | None) -> None:
        super().__init__()
        self.resnets = nn.ModuleList([ResnetBlock3D(in_channels if i == 0 else out_channels, out_channels)
                                      for i in range(layers)])
        if down is not None:
            self.downsamplers = nn.ModuleList([Downsample3D(out_channels, down)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for resnet in self.resnets:
            x = resnet(x)
        return self.downsamplers[0](x) if hasattr(self, "downsamplers") else x


class _UpBlock(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, layers: int, up: bool | None) -> None:
        super().__init__()
        self.resnets = nn.ModuleList([ResnetBlock3D(in_channels if i == 0 else out_channels, out_channels)
                                      for i in range(layers)])
        if up is not None:
            self.upsamplers = nn.ModuleList([Upsample3D(out_channels, up)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for resnet in self.resnets:
            x = resnet(x)
        return self.upsamplers[0](x) if hasattr(self, "upsamplers") else x


class Encoder3D(nn.Module):
    def __init__(self, config: SeedVR2VAEConfig) -> None:
        super().__init__()
        ch = config.block_out_channels
        self.conv_in = CausalConv3d(3, ch[0], 3, padding=1)
        self.down_blocks = nn.ModuleList([
            _DownBlock(ch[max(i - 1, 0)], ch[i], config.layers_per_block,
                       config.temporal_down[i] if i < len(ch) - 1 else None) for i in range(len(ch))])
        self.mid_block = MidBlock3D(ch[-1])
        self.conv_norm_out = nn.GroupNorm(GROUPS, ch[-1], eps=EPS)
        self.conv_out = CausalConv3d(ch[-1], 2 * config.latent_channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv_in(x)
        for block in self.down_blocks:
            x = block(x)
        x = self.mid_block(x)
        return self.conv_out(F.silu(frame_group_norm(self.conv_norm_out, x)))


class Decoder3D(nn.Module):
    def __init__(self, config: SeedVR2VAEConfig) -> None:
        super().__init__()
        rev = tuple(reversed(config.block_out_channels))
        self.conv_in = CausalConv3d(config.latent_channels, rev[0], 3, padding=1)
        self.mid_block = MidBlock3D(rev[0])
        self.up_blocks = nn.ModuleList([
            _UpBlock(rev[max(i - 1, 0)], rev[i], config.layers_per_block + 1,
                     config.temporal_up[i] if i < len(rev) - 1 else None) for i in range(len(rev))])
        self.conv_norm_out = nn.GroupNorm(GROUPS, rev[-1], eps=EPS)
        self.conv_out = CausalConv3d(rev[-1], 3, 3, padding=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        x = self.mid_block(self.conv_in(z))
        for block in self.up_blocks:
            x = block(x)
        return self.conv_out(F.silu(frame_group_norm(self.conv_norm_out, x)))


class SeedVR2VAE(VideoVAESurface):
    """The autoencoder with the video-VAE surface of our `VaePatcher`."""

    label = "SeedVR2"
    timestep_conditioning = False

    def __init__(self, config: SeedVR2VAEConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder = Encoder3D(config)
        self.decoder = Decoder3D(config)

    @property
    def out_channels(self) -> int:
        return 3

    def _dtype(self) -> torch.dtype:
        return self.encoder.conv_in.weight.dtype

    def encode_raw(self, x: torch.Tensor) -> torch.Tensor:
        """`[B, 3, T, H, W]` in -1..1 (H, W multiples of 8) -> the scaled latent mean
        `[B, 16, (T - 1) // 4 + 1, H/8, W/8]`."""
        f = self.downscale_ratio
        if x.ndim != 5 or x.shape[3] % f or x.shape[4] % f:
            raise VAEConfigError(f"SeedVR2 VAE.encode: expected videos [B, 3, T, H, W] with sides multiples of {f}, "
                                 f"got {tuple(x.shape)}")
        moments = self.encoder(x.to(self._dtype()))
        return (moments[:, :self.latent_channels] - SHIFTING_FACTOR) * SCALING_FACTOR

    def decode_raw(self, z: torch.Tensor, output_device: torch.device | str | None = None, **_: Any) -> torch.Tensor:
        """`[B, 16, T', h, w]` -> `[B, 3, 4 (T' - 1) + 1, 8h, 8w]` in about -1..1 (unclamped)."""
        out = self.decoder((z / SCALING_FACTOR + SHIFTING_FACTOR).to(self._dtype()))
        return out if output_device is None else out.to(output_device)

    def working_bytes(self, pixels: int, frames: int, dtype: torch.dtype) -> int:
        """Our estimate of a decode's working memory: the whole clip at the full-resolution level
        (the last up block's width) held about eight times, plus the RGB output."""
        size = torch.empty((), dtype=dtype).element_size()
        channels = self.config.block_out_channels[0]
        return int(8 * channels * frames * pixels * size + 3 * 4 * frames * pixels * size)


__all__ = ["MARKER", "SCALING_FACTOR", "CausalConv3d", "SeedVR2VAE", "SeedVR2VAEConfig", "frame_group_norm",
           "is_seedvr2_vae"]
