"""`SA3VaePatcher`: the VAE wire object over Stable Audio 3's SAME VAE (`comfy_core.models.sa3_vae`).

It answers as ComfyUI's `comfy.sd.VAE` does for an `SA3AudioVAE`: `encode` takes a waveform
`[B, S, C]` (ComfyUI's `VAEEncodeAudio` moves channels last) at 44.1 kHz and returns the latent
`[B, 256, ceil(S / 4096)]`; `decode` returns `[B, T x 4096, C]`; `latent_channels` 256,
`latent_dim` 1, `output_channels` 2, `upscale_ratio` / `downscale_ratio` 4096 (from the weights).
`decode_tiled` decodes `tile_x` latent frames at a time (default 128) overlapping by `overlap`
(default 32), blended by `comfy_core.models.vae_tiling.tiled_nd` as for the Oobleck VAE.
Weight patches apply inside `applied()`.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

from comfy_core.models.sa3_vae import SAMPLE_RATE, SA3VAE, SA3VAEConfig, SA3VAEInputError, is_sa3_vae
from comfy_core.patching.audio_vae import AudioVaePatcher
from comfy_core.patching.vae import STATE_DICT_KINDS, VaeConstructionError, VaePatcher


class SA3VaePatcher(AudioVaePatcher):
    """Patcher for `SA3VAE`; see the module docstring."""

    audio_sample_rate = SAMPLE_RATE

    def __init__(self, model: SA3VAE | Mapping[str, torch.Tensor] | None = None,
                 load_device: torch.device | str | None = None, offload_device: torch.device | str | None = None,
                 *, sd: Mapping[str, torch.Tensor] | None = None, device: torch.device | str | None = None,
                 config: Any = None, dtype: torch.dtype | None = None, metadata: Mapping[str, str] | None = None,
                 cache_patched_weights: bool = True) -> None:
        """A built `SA3VAE`, or (ComfyUI's `comfy.sd.VAE(sd=...)`) its state dict."""
        if config is not None:
            raise VaeConstructionError("comfy.sd.VAE(config=...) with a Stable Audio 3 VAE state dict: its "
                                       "architecture is read from the weights")
        if isinstance(model, Mapping):
            model, sd = None, model
        if model is None:
            if sd is None:
                raise TypeError("SA3VaePatcher: give the Stable Audio 3 VAE or its state dict (sd=...)")
            state = dict(sd)
            model = SA3VAE(SA3VAEConfig.detect_from_weights(state), dtype=dtype or torch.float32)
            model.load_state_dict({k: v.to(dtype or torch.float32) for k, v in state.items()}, strict=True)
            model.eval()
        if not isinstance(model, SA3VAE):
            raise TypeError(f"SA3VaePatcher: expected an SA3VAE, got {type(model).__name__}")
        VaePatcher.__init__(self, model, load_device if load_device is not None else device, offload_device,
                            cache_patched_weights=cache_patched_weights)

    @property
    def latent_channels(self) -> int:
        return int(self.model.config.latent_dim)

    @property
    def latent_dim(self) -> int:
        return 1

    @property
    def upscale_ratio(self) -> int:  # type: ignore[override]
        return int(self.model.config.downscale)

    @property
    def downscale_ratio(self) -> int:  # type: ignore[override]
        return int(self.model.config.downscale)

    @property
    def audio_sample_rate_output(self) -> int:
        return SAMPLE_RATE

    @property
    def autoencoder(self) -> Any:
        return self.model

    def memory_used_encode(self, shape: tuple[int, ...], dtype: torch.dtype) -> int:
        return int(1000 * shape[2] * torch.empty((), dtype=dtype).element_size())

    def memory_used_decode(self, shape: tuple[int, ...], dtype: torch.dtype) -> int:
        return int(1000 * shape[2] * self.upscale_ratio * torch.empty((), dtype=dtype).element_size())

    def encode(self, audio: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """Waveform `[B, S, C]` at 44.1 kHz -> latent `[B, 256, ceil(S / 4096)]` (float32)."""
        if audio.ndim != 3:
            raise SA3VAEInputError(f"SA3 VAE encode: expected a waveform [B, S, C], got {tuple(audio.shape)}")
        with torch.no_grad(), self.applied() as vae:
            waveform = audio.movedim(-1, 1).to(self.load_device, self.vae_dtype)
            return vae.encode(waveform).float().to(self.offload_device)

    def decode(self, latent: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """Latent `[B, 256, T]` -> waveform `[B, T x 4096, C]` (float32)."""
        with torch.no_grad(), self.applied() as vae:
            out = vae.decode(latent.to(self.load_device, self.vae_dtype)).float()
        return out.to(self.offload_device).movedim(1, -1)

    def decode_tiled(self, samples: torch.Tensor, tile_x: int | None = None, tile_y: int | None = None,  # type: ignore[override]
                     overlap: int | None = None, tile_t: int | None = None, overlap_t: int | None = None,
                     **_: Any) -> torch.Tensor:
        from comfy_core.models.vae_tiling import Axis, tiled_nd

        tile = int(tile_x if tile_x is not None else 128)
        lap = int(overlap if overlap is not None else 32)
        if samples.ndim != 3:
            raise SA3VAEInputError(f"SA3 VAE decode_tiled: expected a latent [B, C, T], got {tuple(samples.shape)}")
        if tile < 1 or lap < 0 or lap >= tile:
            raise SA3VAEInputError(f"SA3 VAE decode_tiled: need tile >= 1 and 0 <= overlap < tile, "
                                   f"got tile {tile}, overlap {lap}")
        with torch.no_grad(), self.applied() as vae:
            def run(piece: torch.Tensor) -> torch.Tensor:
                return vae.decode(piece.to(self.load_device, self.vae_dtype)).float()

            ratio = self.upscale_ratio
            axis = Axis(tile, lap, size=lambda n: n * ratio, place=lambda p: p * ratio)
            out = tiled_nd(samples, run, [axis], self.output_channels, self.offload_device)
        return out.movedim(1, -1)


STATE_DICT_KINDS.append((is_sa3_vae, SA3VaePatcher))
