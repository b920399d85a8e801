"""The one-frame image VAE in the Wan 2.2 layout: Qwen-Image 2.1's (`qwen_image_2.1_vae*.safetensors`).

ComfyUI (`comfy/sd.py: VAE`) recognises it as a Wan 2.2 VAE (`decoder.upsamples.0.upsamples.0.
residual.2.weight`) whose decoder head has a 5-D kernel one frame deep, and builds its Wan 2.2
network with `temporal_kernel` 1, five levels, no 2x2 patches and RGBA pixels: 64 latent channels
at 1/16 of the pixels. Every 3x3 convolution sees one frame, so an image is one chunk: the
temporal resamplings and their `time_conv` never run (the first chunk skips them), and the
residual levels' average shortcuts still average over a zero frame padded in front (as the Wan
2.2 network does on a first frame; diffusers' `AutoencoderKLQwenImage21` computes the same).

Unlike the Wan video VAEs, the latent is an image's, `[B, 64, h, w]` (ComfyUI's `latent_dim` 2),
and so is the interface (`comfy_core.patching.vae.VaePatcher`'s image path): `encode` takes IMAGE
`[B, H, W, C]` in 0..1 (sides centre-cropped to multiples of 16; RGB gets an opaque alpha,
ComfyUI's `pad_channel_value` 1.0) and returns the posterior mean; `decode` returns
`[B, H, W, 4]` (RGBA) in 0..1. The network and its names are `comfy_core.models.wan_vae.WanVAE`'s.
"""
from __future__ import annotations

import torch

from comfy_core.models.vae import VAEConfigError
from comfy_core.models.wan_vae import WanVAE
from comfy_core.models.wan_vae_config import WanVAEConfig


def is_image_config(config: WanVAEConfig) -> bool:
    """Whether a Wan-layout VAE is the one-frame image kind (its convolutions span one frame)."""
    return config.temporal_kernel == 1


class WanImageVAE(WanVAE):
    """`WanVAE` with one-frame kernels, used on images (see the module docstring)."""

    latent_dim = 2  # [B, C, h, w]

    def __init__(self, config: WanVAEConfig) -> None:
        if not is_image_config(config):
            raise VAEConfigError(f"WanImageVAE: needs one-frame kernels (temporal_kernel 1), "
                                 f"got {config.temporal_kernel}")
        super().__init__(config)

    def encode(self, pixels: torch.Tensor) -> torch.Tensor:
        """IMAGE [B, H, W, C>=3] in 0..1 -> latent mean [B, z_dim, H/f, W/f] (float32)."""
        if pixels.ndim != 4 or pixels.shape[-1] < 3:
            raise VAEConfigError(f"VAE.encode: expected pixels [B, H, W, C>=3], got {tuple(pixels.shape)}")
        f = self.downscale_ratio
        height, width = (pixels.shape[1] // f) * f, (pixels.shape[2] // f) * f
        if height == 0 or width == 0:
            raise VAEConfigError(f"VAE.encode: image {pixels.shape[2]}x{pixels.shape[1]} is smaller than {f}x{f}")
        if (height, width) != tuple(pixels.shape[1:3]):
            top, left = (pixels.shape[1] % f) // 2, (pixels.shape[2] % f) // 2
            pixels = pixels[:, top:top + height, left:left + width]
        x = pixels[..., :self.out_channels].movedim(-1, 1).unsqueeze(2) * 2.0 - 1.0  # [B, 3|4, 1, H, W]
        return self.encode_raw(x)[:, :, 0].float()

    def decode(self, latent: torch.Tensor) -> torch.Tensor:
        """latent [B, z_dim, h, w] -> IMAGE [B, h*f, w*f, C] in 0..1 (float32; C 4 for RGBA)."""
        if latent.ndim == 5 and latent.shape[2] == 1:
            latent = latent[:, :, 0]
        if latent.ndim != 4 or latent.shape[1] != self.latent_channels:
            raise VAEConfigError(f"VAE.decode: expected a latent [B, {self.latent_channels}, h, w], "
                                 f"got {tuple(latent.shape)}")
        x = self.decode_raw(latent.unsqueeze(2))[:, :, 0].float()  # [B, C, H, W]
        return ((x + 1.0) / 2.0).clamp(0.0, 1.0).movedim(1, -1)
