"""The Wan video VAE (`WanVAE`): Wan 2.1's (16 latent channels, 8x spatial, 4x temporal) and,
with a `residual` configuration, Wan 2.2's (48 channels, 16x spatial via 2x2 patches).

Wan Team 2025 ("Wan: Open and Advanced Large-Scale Video Generative Models", sec. 3.1): a causal
3-D VAE whose encoder reads the first frame alone and then 4 frames at a time, and whose decoder
writes one latent frame at a time, each causal convolution carrying its last input frames to the
next chunk (`wan_vae_blocks.FrameCache`), so memory follows the chunk, not the video's length.
T frames give 1 + (T - 1) // 4 latent frames; T' latent frames decode to 1 + 4 (T' - 1).
Module and parameter names are the original `wan/modules/vae.py` ones that ComfyUI's
`comfy/ldm/wan/vae.py` loads (`encoder.conv1`, `encoder.downsamples.N`, `encoder.middle`,
`encoder.head`, `conv1`, `conv2`, `decoder.*`), so `wan_2.1_vae.safetensors` and
`wan2.2_vae.safetensors` load unchanged (diffusers' names are converted: `wan_vae_keys`).

Pixel conventions are ComfyUI's (`comfy/sd.py: VAE` for Wan): `encode` takes the frames of an
IMAGE batch `[T, H, W, C]` (or videos `[B, T, H, W, C]`) in 0..1, centre-crops the sides to a
multiple of the spatial factor, uses the first 4k + 1 frames (the encoder's chunks never reach
the rest) and returns the posterior mean `[B, C, T', h, w]`; `decode` returns `[B, T, H, W, 3]`
in 0..1. Latents are the raw VAE space: the per-channel mean/std normalisation is the latent
format's (`comfy_core.families.wan.latent_format`), applied by the sampler as in ComfyUI.
"""
from __future__ import annotations

import logging

import torch
from torch import nn

from comfy_core.models.vae import VAEConfigError
from comfy_core.models.wan_vae22 import wan22_downsamples, wan22_upsamples
from comfy_core.models.wan_vae_blocks import (CausalConv3d, FrameCache, Resample, ResidualBlock, conv3x3, head,
                                              middle, patchify, run, unpatchify)
from comfy_core.models.wan_vae_config import WanVAEConfig

log = logging.getLogger(__name__)


def wan21_downsamples(config: WanVAEConfig) -> nn.Sequential:
    """`encoder.downsamples`: every level's residual blocks then its resample, in one flat list."""
    dims = [config.dim * m for m in (1, *config.dim_mult)]
    layers: list[nn.Module] = []
    for i, (cin, cout) in enumerate(zip(dims[:-1], dims[1:])):
        for _ in range(config.num_res_blocks):
            layers.append(ResidualBlock(cin, cout, config.temporal_kernel))
            cin = cout
        if i < len(config.dim_mult) - 1:
            layers.append(Resample(cout, "downsample3d" if config.temporal_downsample[i] else "downsample2d",
                                   frames=config.temporal_kernel))
    return nn.Sequential(*layers)


def wan21_upsamples(config: WanVAEConfig) -> nn.Sequential:
    """`decoder.upsamples`: every level's residual blocks then its resample (which halves the
    width, so the next level starts at half its predecessor's width), deepest level first."""
    mult = config.dim_mult
    dims = [config.decoder_dim * m for m in (mult[-1], *reversed(mult))]
    temporal_up = tuple(reversed(config.temporal_downsample))
    layers: list[nn.Module] = []
    for i, (cin, cout) in enumerate(zip(dims[:-1], dims[1:])):
        if i > 0:
            cin //= 2
        for _ in range(config.num_res_blocks + 1):
            layers.append(ResidualBlock(cin, cout, config.temporal_kernel))
            cin = cout
        if i < len(mult) - 1:
            layers.append(Resample(cout, "upsample3d" if temporal_up[i] else "upsample2d", out_channels=cout // 2,
                                   frames=config.temporal_kernel))
    return nn.Sequential(*layers)


class Encoder3d(nn.Module):
    """conv1, the levels, the middle, the head to 2 * z_dim moments."""

    def __init__(self, config: WanVAEConfig, downsamples: nn.Sequential) -> None:
        super().__init__()
        frames = config.temporal_kernel
        self.conv1 = conv3x3(config.image_channels, config.dim, frames)
        self.downsamples = downsamples
        width = config.dim * config.dim_mult[-1]
        self.middle = middle(width, frames)
        self.head = head(width, 2 * config.z_dim, frames)

    def forward(self, x: torch.Tensor, cache: FrameCache) -> torch.Tensor:
        x = self.conv1(x, cache)
        for stage in (self.downsamples, self.middle, self.head):
            for layer in stage:
                x = run(layer, x, cache)
        return x


class Decoder3d(nn.Module):
    """conv1, the middle, the levels, the head to the (patchified) RGB channels."""

    def __init__(self, config: WanVAEConfig, upsamples: nn.Sequential) -> None:
        super().__init__()
        width = config.decoder_dim * config.dim_mult[-1]
        frames = config.temporal_kernel
        self.conv1 = conv3x3(config.z_dim, width, frames)
        self.middle = middle(width, frames)
        self.upsamples = upsamples
        self.head = head(config.decoder_dim * config.dim_mult[0], config.image_channels, frames)

    def forward(self, x: torch.Tensor, cache: FrameCache) -> torch.Tensor:
        x = self.conv1(x, cache)
        for stage in (self.middle, self.upsamples, self.head):
            for layer in stage:
                x = run(layer, x, cache)
        return x


def latent_frames(frames: int, ratio: int = 4) -> int:
    """Latent frames for `frames` video frames: 1 + (frames - 1) // ratio, 0 for none
    (ComfyUI's `downscale_ratio[0]` for Wan: floor((frames + 3) / 4))."""
    return max(0, (frames + ratio - 1) // ratio)


def pixel_frames(latents: int, ratio: int = 4) -> int:
    """Video frames decoded from `latents` latent frames: 1 + ratio (latents - 1), 0 for none."""
    return max(0, latents * ratio - (ratio - 1))


class WanVAE(nn.Module):
    """Encoder, `conv1` (moments), `conv2` (latent in), decoder; Wan 2.1 or, when
    `config.residual`, Wan 2.2 levels."""

    latent_dim = 3  # a latent has three axes after the channels: [B, C, T, h, w]

    def __init__(self, config: WanVAEConfig) -> None:
        super().__init__()
        self.config = config
        down, up = (wan22_downsamples, wan22_upsamples) if config.residual else (wan21_downsamples, wan21_upsamples)
        self.encoder = Encoder3d(config, down(config))
        self.conv1 = CausalConv3d(2 * config.z_dim, 2 * config.z_dim, 1)
        self.conv2 = CausalConv3d(config.z_dim, config.z_dim, 1)
        self.decoder = Decoder3d(config, up(config))

    @property
    def downscale_ratio(self) -> int:
        """Pixels per latent pixel along each side."""
        return self.config.spatial_ratio

    @property
    def temporal_ratio(self) -> int:
        return self.config.temporal_ratio

    @property
    def latent_channels(self) -> int:
        return self.config.z_dim

    @property
    def out_channels(self) -> int:
        """Pixel channels decoded: 3, or 4 for an RGBA VAE (Qwen-Image-Layered's)."""
        return self.config.rgb_channels

    def _dtype(self) -> torch.dtype:
        return self.conv2.weight.dtype

    def encode_raw(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, 3, T, H, W] in -1..1 -> the posterior mean [B, z_dim, 1 + (T-1)//4, H/f, W/f]
        (frames past the last chunk of 4 are not read). An RGBA VAE takes [B, 4, ...] too; given
        RGB it encodes an opaque alpha (1), as diffusers' Layered pipeline converts its input
        image to RGBA."""
        if x.shape[1] == 3 and self.config.rgb_channels == 4:
            x = torch.cat([x, torch.ones_like(x[:, :1])], dim=1)
        if x.shape[1] != self.config.rgb_channels:
            raise VAEConfigError(f"Wan VAE.encode: {x.shape[1]} pixel channels, the VAE takes "
                                 f"{self.config.rgb_channels}")
        x = patchify(x.to(self._dtype()), self.config.patch_size)
        ratio = self.temporal_ratio
        chunks = [(0, 1)] + [(s, s + ratio) for s in range(1, x.shape[2] - ratio + 1, ratio)]
        cache = FrameCache()
        means = []
        for start, stop in chunks:
            moments = self.conv1(self.encoder(x[:, :, start:stop], cache))  # [B, 2 z, t, h, w]
            means.append(moments[:, :self.config.z_dim])
            cache.next_chunk()
        return torch.cat(means, dim=2)

    def decode_raw(self, z: torch.Tensor, output_device: torch.device | str | None = None) -> torch.Tensor:
        """z [B, z_dim, T', h, w] -> x [B, 3, 1 + 4 (T'-1), h*f, w*f] in about -1..1 (unclamped),
        one latent frame at a time; the frames are gathered on `output_device` (default: z's)."""
        batch, _, frames, height, width = z.shape
        cache = FrameCache()
        out: torch.Tensor | None = None
        done = 0
        for index in range(frames):
            chunk = self.conv2(z[:, :, index:index + 1].to(self._dtype()))
            pixels = unpatchify(self.decoder(chunk, cache), self.config.patch_size)  # [B, 3, 1 or 4, H, W]
            if out is None:
                out = torch.empty((batch, pixels.shape[1], pixel_frames(frames, self.temporal_ratio),
                                   *pixels.shape[-2:]), dtype=pixels.dtype,
                                  device=output_device if output_device is not None else z.device)
            out[:, :, done:done + pixels.shape[2]] = pixels
            done += pixels.shape[2]
            cache.next_chunk()
        assert out is not None and done == out.shape[2]
        return out

    def encode(self, pixels: torch.Tensor) -> torch.Tensor:
        """Frames [T, H, W, C] (or videos [B, T, H, W, C]) in 0..1 -> latent mean
        [B, z_dim, T', H/f, W/f] (float32); see the module docstring for crops."""
        if pixels.ndim not in (4, 5) or pixels.shape[-1] < 3:
            raise VAEConfigError(f"Wan VAE.encode: expected frames [T, H, W, C>=3] or videos [B, T, H, W, C>=3], "
                                 f"got {tuple(pixels.shape)}")
        video = pixels if pixels.ndim == 5 else pixels.unsqueeze(0)
        f = self.downscale_ratio
        frames, height, width = video.shape[1], (video.shape[2] // f) * f, (video.shape[3] // f) * f
        if height == 0 or width == 0:
            raise VAEConfigError(f"Wan VAE.encode: frames {video.shape[3]}x{video.shape[2]} are smaller than {f}x{f}")
        if frames == 0:
            raise VAEConfigError("Wan VAE.encode: no frames to encode")
        if (height, width) != tuple(video.shape[2:4]):
            top, left = (video.shape[2] % f) // 2, (video.shape[3] % f) // 2
            video = video[:, :, top:top + height, left:left + width]
        used = pixel_frames(latent_frames(frames, self.temporal_ratio), self.temporal_ratio)
        if used != frames:
            log.warning("Wan VAE.encode: %d frames given, the VAE takes 4k+1: encoding the first %d", frames, used)
        # RGB (RGBA VAE: the alpha too when given; encode_raw adds an opaque one otherwise)
        x = video[:, :used, ..., :self.out_channels].permute(0, 4, 1, 2, 3) * 2.0 - 1.0  # [B, 3|4, T, H, W]
        return self.encode_raw(x).float()

    def decode(self, latent: torch.Tensor) -> torch.Tensor:
        """latent [B, z_dim, T', h, w] -> videos [B, T, h*f, w*f, 3] in 0..1 (float32)."""
        if latent.ndim != 5 or latent.shape[1] != self.latent_channels:
            raise VAEConfigError(f"Wan VAE.decode: expected a latent [B, {self.latent_channels}, T, h, w], "
                                 f"got {tuple(latent.shape)}")
        x = self.decode_raw(latent).float()
        return ((x + 1.0) / 2.0).clamp(0.0, 1.0).permute(0, 2, 3, 4, 1)
