"""The surface our `VaePatcher` and the VAE nodes read of a causal video VAE (HunyuanVideo 1.0 and
1.5, LTX-Video, SeedVR2), in one place: its ratios and latent width from its `config`, and IMAGE
frames in / out around the network's own `encode_raw` / `decode_raw` (-1..1 videos `[B, 3, T, H, W]`).

- `encode(pixels)`: frames `[T, H, W, C]` (one video) or `[B, T, H, W, C]` in 0..1 (C >= 3; an alpha
  channel is dropped), both sides centre-cropped to multiples of the spatial ratio (ComfyUI's crop),
  mapped to -1..1 -> the float32 latent `encode_raw` gives (its own frame-count rule applies).
- `decode(latent)`: `[B, C, T', h, w]` -> videos `[B, T, H, W, 3]` in 0..1 (clamped).
"""
from __future__ import annotations

import torch
from torch import nn

from comfy_core.models.vae import VAEConfigError


class VideoVAESurface(nn.Module):
    """Mixed into a video VAE whose `config` has `spatial_ratio`, `temporal_ratio` and
    `latent_channels` and which defines `encode_raw` / `decode_raw`; `label` names it in errors."""

    latent_dim = 3
    label = "video"

    @property
    def downscale_ratio(self) -> int:
        return self.config.spatial_ratio

    @property
    def temporal_ratio(self) -> int:
        return self.config.temporal_ratio

    @property
    def latent_channels(self) -> int:
        return self.config.latent_channels

    def encode(self, pixels: torch.Tensor) -> torch.Tensor:
        """Frames (or videos) in 0..1 -> the latent (module docstring)."""
        if pixels.ndim not in (4, 5) or pixels.shape[-1] < 3:
            raise VAEConfigError(f"{self.label} VAE.encode: expected frames [T, H, W, C>=3], got {tuple(pixels.shape)}")
        video = pixels if pixels.ndim == 5 else pixels.unsqueeze(0)
        f = self.downscale_ratio
        height, width = (video.shape[2] // f) * f, (video.shape[3] // f) * f
        if height == 0 or width == 0:
            raise VAEConfigError(f"{self.label} VAE.encode: frames {video.shape[3]}x{video.shape[2]} are smaller than "
                                 f"{f}x{f}")
        top, left = (video.shape[2] % f) // 2, (video.shape[3] % f) // 2
        video = video[:, :, top:top + height, left:left + width]
        return self.encode_raw(video[..., :3].permute(0, 4, 1, 2, 3) * 2.0 - 1.0).float()

    def decode(self, latent: torch.Tensor) -> torch.Tensor:
        """The latent -> videos `[B, T, H, W, 3]` in 0..1 (module docstring)."""
        if latent.ndim != 5 or latent.shape[1] != self.latent_channels:
            raise VAEConfigError(f"{self.label} VAE.decode: expected a latent [B, {self.latent_channels}, T, h, w], "
                                 f"got {tuple(latent.shape)}")
        return ((self.decode_raw(latent).float() + 1.0) / 2.0).clamp(0.0, 1.0).permute(0, 2, 3, 4, 1)
