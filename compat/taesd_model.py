"""ComfyUI's `TAESD` module (comfy/taesd/taesd.py), what `latent_preview.TAESD` is: a TAESD
decoder (comfy_core/models/taesd.py, the same layer layout and state-dict keys) with ComfyUI's
`vae_scale` / `vae_shift` parameters and `decode` ([-1, 1] images), for packs that build their
own TAESD previewers (Impact-Pack: `TAESD(None, decoder_path, latent_channels=...).to(device)`).

This engine has no TAESD encoder: `encoder_path` and `encode` raise `TAESDEncoderMissingError`.
"""
from __future__ import annotations

import torch
from torch import nn

from comfy_core.models.taesd import TAESDDecoder, TAESDError, load_taesd_decoder


class TAESDEncoderMissingError(RuntimeError):
    """A TAESD encoder was asked for; only the decoder exists here (previews decode)."""


class TAESD(nn.Module):
    latent_magnitude = 3
    latent_shift = 0.5

    def __init__(self, encoder_path: str | None = None, decoder_path: str | None = None,
                 latent_channels: int = 4) -> None:
        super().__init__()
        if encoder_path is not None:
            raise TAESDEncoderMissingError(f"TAESD({encoder_path!r}, ...): this engine provides the TAESD decoder "
                                           "only (for previews); there is no TAESD encoder")
        if decoder_path is not None:
            decoder = load_taesd_decoder(decoder_path)
            if decoder.latent_channels != latent_channels:
                raise TAESDError(f"{decoder_path}: a decoder for {decoder.latent_channels} latent channels, "
                                 f"asked for {latent_channels}")
        else:
            decoder = TAESDDecoder(latent_channels=latent_channels)
        self.taesd_decoder = decoder
        self.vae_scale = nn.Parameter(torch.tensor(1.0))
        self.vae_shift = nn.Parameter(torch.tensor(0.0))

    @staticmethod
    def scale_latents(x: torch.Tensor) -> torch.Tensor:
        """raw latents -> [0, 1]"""
        return x.div(2 * TAESD.latent_magnitude).add(TAESD.latent_shift).clamp(0, 1)

    @staticmethod
    def unscale_latents(x: torch.Tensor) -> torch.Tensor:
        """[0, 1] -> raw latents"""
        return x.sub(TAESD.latent_shift).mul(2 * TAESD.latent_magnitude)

    def decode(self, x: torch.Tensor) -> torch.Tensor:
        """[B, C, h, w] model-space latent -> [B, 3, 8h, 8w] image in [-1, 1]."""
        return self.taesd_decoder((x - self.vae_shift) * self.vae_scale).sub(0.5).mul(2)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        raise TAESDEncoderMissingError("TAESD.encode: there is no TAESD encoder in this engine")
