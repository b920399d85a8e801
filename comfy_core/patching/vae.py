"""`VaePatcher`: the VAE wire object, a patcher over `comfy_core.models.vae.AutoencoderKL`.

`encode`/`decode` run the module inside `applied()`, so the VAE's attention honours the
patcher's attention backend and any weight patches, and the module is restored afterwards.
"""
from __future__ import annotations

import torch

from comfy_core.patching.patcher import Patcher


class VaePatcher(Patcher):
    """Patcher for VAE. `model` is the AutoencoderKL (`encode(pixels)`, `decode(latent)`)."""

    @property
    def first_stage_model(self) -> torch.nn.Module:
        return self.model

    def encode(self, pixels: torch.Tensor) -> torch.Tensor:
        """Pixels `[B, H, W, C]` in 0..1 to a latent `[B, c, h, w]` (the module's scaling)."""
        with torch.no_grad(), self.applied() as vae:
            return vae.encode(pixels.to(self.load_device)).to(self.offload_device)

    def decode(self, latent: torch.Tensor) -> torch.Tensor:
        """A latent `[B, c, h, w]` to pixels `[B, H, W, C]` in 0..1."""
        with torch.no_grad(), self.applied() as vae:
            return vae.decode(latent.to(self.load_device)).to(self.offload_device)
