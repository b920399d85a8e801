"""`MusicDCAEVaePatcher`: the VAE wire object over ACE-Step 1's music DCAE + vocoder
(`comfy_core.models.music_dcae`).

It answers as ComfyUI's `comfy.sd.VAE` does for this VAE (`comfy/sd.py`, the
`vocoder.backbone.channel_layers.0.0.bias` branch): `encode` takes a waveform `[B, S, 2]` at
44.1 kHz (ComfyUI's `VAEEncodeAudio` moves channels last and resamples to `audio_sample_rate`) and
returns `[B, 8, 16, ceil(S / 4096)]`; `decode` returns `[B, T * 4096, 2]`; `latent_channels` 8,
`latent_dim` 2, `output_channels` 2, `upscale_ratio` / `downscale_ratio` 4096, ComfyUI's memory
estimates (`S * 330` and `rows * T * 87000` bytes of dtype). It is an `AudioVaePatcher`, so the
audio nodes take it. Weight patches apply inside `applied()`.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

from comfy_core.models.music_dcae import (MusicDCAE, MusicDCAEConfig, MusicDCAEInputError, is_music_dcae,
                                          music_dcae_state_dict)
from comfy_core.patching.audio_vae import INPUT_SAMPLE_RATE, AudioVaePatcher
from comfy_core.patching.vae import STATE_DICT_KINDS, VaeConstructionError, VaePatcher


class MusicDCAEVaePatcher(AudioVaePatcher):
    """Patcher for `MusicDCAE`; see the module docstring."""

    audio_sample_rate = INPUT_SAMPLE_RATE
    output_channels = 2
    upscale_ratio = 4096
    downscale_ratio = 4096

    def __init__(self, model: MusicDCAE | Mapping[str, torch.Tensor] | None = None,
                 load_device: torch.device | str | None = None, offload_device: torch.device | str | None = None,
                 *, sd: Mapping[str, torch.Tensor] | None = None, device: torch.device | str | None = None,
                 config: Any = None, dtype: torch.dtype | None = None, metadata: Mapping[str, str] | None = None,
                 cache_patched_weights: bool = True) -> None:
        """A built `MusicDCAE`, or (ComfyUI's `comfy.sd.VAE(sd=...)`) its state dict."""
        if config is not None:
            raise VaeConstructionError("comfy.sd.VAE(config=...) with a music DCAE state dict: its architecture is "
                                       "read from the weights")
        if isinstance(model, Mapping):
            model, sd = None, model
        if model is None:
            if sd is None:
                raise TypeError("MusicDCAEVaePatcher: give the music DCAE or its state dict (sd=...)")
            state = music_dcae_state_dict(sd)
            model = MusicDCAE(MusicDCAEConfig.detect_from_weights(state)).to(dtype or torch.float32)
            model.load_state_dict({k: v.to(dtype or torch.float32) for k, v in state.items()}, strict=True)
            model.eval()
        if not isinstance(model, MusicDCAE):
            raise TypeError(f"MusicDCAEVaePatcher: expected a MusicDCAE, got {type(model).__name__}")
        VaePatcher.__init__(self, model, load_device if load_device is not None else device, offload_device,
                            cache_patched_weights=cache_patched_weights)

    @property
    def latent_channels(self) -> int:
        return int(self.model.config.latent_channels)

    @property
    def latent_dim(self) -> int:
        return 2

    @property
    def audio_sample_rate_output(self) -> int:
        return INPUT_SAMPLE_RATE

    @property
    def autoencoder(self) -> Any:
        return self.model

    def memory_used_encode(self, shape: tuple[int, ...], dtype: torch.dtype) -> int:
        return int(shape[2] * 330 * torch.empty((), dtype=dtype).element_size())

    def memory_used_decode(self, shape: tuple[int, ...], dtype: torch.dtype) -> int:
        return int(shape[2] * shape[3] * 87000 * torch.empty((), dtype=dtype).element_size())

    def encode(self, audio: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """Waveform `[B, S, C]` at 44.1 kHz -> latent `[B, 8, 16, ceil(S / 4096)]` (float32)."""
        if audio.ndim != 3:
            raise MusicDCAEInputError(f"music DCAE encode: expected a waveform [B, S, C], got {tuple(audio.shape)}")
        with torch.no_grad(), self.applied() as vae:
            return vae.encode(audio.movedim(-1, 1).to(self.load_device)).float().to(self.offload_device)

    def decode(self, latent: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """Latent `[B, 8, 16, T]` -> waveform `[B, T * 4096, C]` (float32)."""
        with torch.no_grad(), self.applied() as vae:
            dtype = next(vae.parameters()).dtype
            out = vae.decode(latent.to(self.load_device, dtype)).float()
        return out.to(self.offload_device).movedim(1, -1)

    def decode_tiled(self, samples: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:  # type: ignore[override]
        """Not tiled here: the whole latent is decoded (`decode`)."""
        return self.decode(samples)


STATE_DICT_KINDS.append((is_music_dcae, MusicDCAEVaePatcher))
