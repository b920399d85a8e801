"""ComfyUI's "pixel_space" VAE (comfy/pixel_space_convert.py): no network at all, for models that
denoise the image itself (Chroma Radiance). VAEEncode turns IMAGE `[B, H, W, C]` in 0..1 into a
"latent" `[B, 3, H, W]` in -1..1, VAEDecode turns it back, clamped; the factor is 1.

VAELoader offers it under the name `pixel_space` whatever the vae folders hold, and a state dict
holding only ComfyUI's marker tensor `pixel_space_vae` builds it too (what ComfyUI's loader and
`comfy.sd.VAE(sd=...)` do).
"""
from __future__ import annotations

import torch
from torch import nn

from comfy_core.models.vae import VAEConfigError

MARKER = "pixel_space_vae"  # ComfyUI's state-dict key for this VAE


class PixelSpaceVAE(nn.Module):
    downscale_ratio = 1
    latent_channels = 3
    latent_dim = 2

    def __init__(self) -> None:
        super().__init__()
        # ComfyUI's one parameter: gives the module a dtype and device, and its state dict the marker.
        self.pixel_space_vae = nn.Parameter(torch.tensor(1.0), requires_grad=False)

    def encode(self, pixels: torch.Tensor) -> torch.Tensor:
        """IMAGE [B, H, W, C>=3] in 0..1 -> [B, 3, H, W] in -1..1 (alpha dropped, as every VAE here)."""
        if pixels.ndim != 4 or pixels.shape[-1] < 3:
            raise VAEConfigError(f"VAE.encode: expected pixels [B, H, W, C>=3], got {tuple(pixels.shape)}")
        return pixels[..., :3].movedim(-1, 1).float() * 2.0 - 1.0

    def decode(self, latent: torch.Tensor) -> torch.Tensor:
        """[B, 3, H, W] in about -1..1 -> IMAGE [B, H, W, 3] in 0..1, clamped."""
        if latent.ndim != 4 or latent.shape[1] != self.latent_channels:
            raise VAEConfigError(f"VAE.decode: expected a pixel-space latent [B, 3, H, W], got {tuple(latent.shape)}")
        return ((latent.float() + 1.0) / 2.0).clamp(0.0, 1.0).movedim(1, -1)
