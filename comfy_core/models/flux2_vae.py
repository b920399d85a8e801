"""Flux.2's autoencoder (Black Forest Labs 2025; diffusers' `AutoencoderKLFlux2`): the KL autoencoder
of `comfy_core.models.vae` with 32 latent channels and its quantisation convolutions, plus the
latent normalisation FLUX.2 samples in: the posterior mean is cut into 2x2 patches (128 channels
at 1/16 of the image, channel `4c + 2i + j` = channel `c` at offset `(i, j)`) and normalised by
the batch-norm statistics stored with the weights (`bn.running_mean`, `bn.running_var`, eps 1e-4,
no affine), `(z - mean) / sqrt(var + eps)`. Decoding inverts both. The normalisation lives in the
VAE, as in ComfyUI (whose Flux.2 latent format is then the identity); diffusers' pipeline does the
same steps outside its VAE (`_patchify_latents`, the `bn` statistics).

It sits here, beside the other VAEs, because the VAE loader (`comfy_core.patching.vae_build`)
builds it from the weights (the `bn.running_mean` marker), below the families (docs/dev/layers.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from comfy_core.models.vae import AutoencoderKL, VAEConfig, VAEConfigError

FLUX2_BN_EPS = 1e-4
PATCH = 2
MARKER = "bn.running_mean"


@dataclass(frozen=True)
class Flux2VAEConfig:
    """The autoencoder's `VAEConfig` (`vae`) seen from the latent side: `downscale` and
    `embed_dim` are those of Flux.2's patched latent (2x and 4x the network's); every other field
    is the network's."""

    vae: VAEConfig

    @property
    def downscale(self) -> int:
        return self.vae.downscale * PATCH

    @property
    def embed_dim(self) -> int:
        return self.vae.embed_dim * PATCH * PATCH

    def __getattr__(self, name: str) -> Any:
        if name == "vae":  # not set yet (copying): no recursion
            raise AttributeError(name)
        return getattr(self.vae, name)


class LatentStatistics(nn.Module):
    """The stored batch-norm statistics (`running_mean`, `running_var` over the patched channels;
    `num_batches_tracked` kept so files that hold it load)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_var", torch.ones(channels))
        self.register_buffer("num_batches_tracked", torch.zeros((), dtype=torch.long))

    def std(self) -> torch.Tensor:
        return torch.sqrt(self.running_var.float() + FLUX2_BN_EPS)


def _patchify(z: torch.Tensor) -> torch.Tensor:
    b, c, h, w = z.shape  # [B, c, h, w] -> [B, 4c, h/2, w/2]
    return z.reshape(b, c, h // PATCH, PATCH, w // PATCH, PATCH).permute(0, 1, 3, 5, 2, 4).reshape(
        b, c * PATCH * PATCH, h // PATCH, w // PATCH)


def _unpatchify(z: torch.Tensor) -> torch.Tensor:
    b, c4, h, w = z.shape  # [B, 4c, h, w] -> [B, c, 2h, 2w]
    c = c4 // (PATCH * PATCH)
    return z.reshape(b, c, PATCH, PATCH, h, w).permute(0, 1, 4, 2, 5, 3).reshape(b, c, h * PATCH, w * PATCH)


class Flux2AutoencoderKL(AutoencoderKL):
    """`AutoencoderKL` whose latents are Flux.2's: patched 2x2 and normalised (see the module doc)."""

    def __init__(self, config: VAEConfig | Flux2VAEConfig) -> None:
        latent = config if isinstance(config, Flux2VAEConfig) else Flux2VAEConfig(config)
        super().__init__(latent.vae)
        self.config = latent  # the latent side (tiled coding and the loader's checks read it)
        self.bn = LatentStatistics(latent.embed_dim)

    @property
    def downscale_ratio(self) -> int:
        return self.config.downscale

    @property
    def latent_channels(self) -> int:
        return self.config.embed_dim

    def normalize(self, mean: torch.Tensor) -> torch.Tensor:
        """Posterior mean `[B, c, h, w]` -> Flux.2's latent `[B, 4c, h/2, w/2]` (float32)."""
        z = _patchify(mean.float())
        stats = self.bn
        return (z - stats.running_mean.float()[None, :, None, None]) / stats.std()[None, :, None, None]

    def denormalize(self, latent: torch.Tensor) -> torch.Tensor:
        """Flux.2's latent `[B, 4c, h, w]` -> the decoder's `[B, c, 2h, 2w]` (float32)."""
        stats = self.bn
        z = latent.float() * stats.std()[None, :, None, None] + stats.running_mean.float()[None, :, None, None]
        return _unpatchify(z)

    def encode_moments(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x `[B, 3, H, W]` in -1..1 -> (Flux.2 latent `[B, 4c, H/f, W/f]`, the patched log-variance)."""
        mean, logvar = super().encode_moments(x)
        return self.normalize(mean), _patchify(logvar.float())

    def decode_raw(self, z: torch.Tensor) -> torch.Tensor:
        """Flux.2 latent `[B, 4c, h, w]` -> x `[B, 3, h*f, w*f]` in about -1..1."""
        return super().decode_raw(self.denormalize(z))

    def decode(self, latent: torch.Tensor) -> torch.Tensor:
        """Flux.2 latent `[B, 128, h, w]` -> IMAGE `[B, h*16, w*16, 3]` in 0..1."""
        if latent.ndim != 4 or latent.shape[1] != self.latent_channels:
            raise VAEConfigError(
                f"VAE.decode: expected a Flux.2 latent [B, {self.latent_channels}, h, w], got {tuple(latent.shape)}")
        x = self.decode_raw(latent).float()
        return ((x + 1.0) / 2.0).clamp(0.0, 1.0).movedim(1, -1)
