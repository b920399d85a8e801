"""`OobleckVaePatcher`: the VAE wire object over the Oobleck audio VAE (`comfy_core.models.oobleck_vae`).

It answers as ComfyUI's `comfy.sd.VAE` does for a Stable Audio VAE (`AudioOobleckVAE`): `encode`
takes a waveform `[B, S, C]` (ComfyUI's `VAEEncodeAudio` moves channels last) at 44.1 kHz and
returns the sampled latent `[B, 64, S / 2048]`; `decode` returns `[B, S, C]`; `latent_channels`
64, `latent_dim` 1, `output_channels` 2, `upscale_ratio` / `downscale_ratio` 2048 (from the
weights), ComfyUI's memory estimates. `decode_tiled` is ComfyUI's 1-D tiling
(`decode_tiled_1d`: `tile_x` latent frames, default 128, overlapping by `overlap`, default 32,
blended as ComfyUI's `tiled_scale_multidim` does, by `comfy_core.models.vae_tiling.tiled_nd`; a
`tile_y` is ignored, as ComfyUI pops it for 1-D latents).
It is an `AudioVaePatcher`, so the audio nodes take it. Weight patches apply inside `applied()`.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

from comfy_core.models.oobleck_vae import OobleckConfig, OobleckInputError, OobleckVAE, is_oobleck_vae, \
    oobleck_state_dict
from comfy_core.patching.audio_vae import INPUT_SAMPLE_RATE, AudioVaePatcher
from comfy_core.patching.vae import STATE_DICT_KINDS, VaeConstructionError, VaePatcher


ACE15_STRIDES = (2, 4, 4, 6, 10)  # ACE-Step 1.5's VAE: 1920 samples a frame at 48 kHz
ACE15_SAMPLE_RATE = 48000


class OobleckVaePatcher(AudioVaePatcher):
    """Patcher for `OobleckVAE`; see the module docstring."""

    @property
    def audio_sample_rate(self) -> int:  # type: ignore[override]
        """44.1 kHz (Stable Audio's); 48 kHz for ACE-Step 1.5's strides (ComfyUI tells them apart by
        the second decoder block's 12-tap kernel, a stride of 6)."""
        return ACE15_SAMPLE_RATE if tuple(self.model.config.strides) == ACE15_STRIDES else INPUT_SAMPLE_RATE

    def __init__(self, model: OobleckVAE | Mapping[str, torch.Tensor] | None = None,
                 load_device: torch.device | str | None = None, offload_device: torch.device | str | None = None,
                 *, sd: Mapping[str, torch.Tensor] | None = None, device: torch.device | str | None = None,
                 config: Any = None, dtype: torch.dtype | None = None, metadata: Mapping[str, str] | None = None,
                 cache_patched_weights: bool = True) -> None:
        """A built `OobleckVAE`, or (ComfyUI's `comfy.sd.VAE(sd=...)`) its state dict."""
        if config is not None:
            raise VaeConstructionError("comfy.sd.VAE(config=...) with an Oobleck VAE state dict: its architecture "
                                       "is read from the weights")
        if isinstance(model, Mapping):
            model, sd = None, model
        if model is None:
            if sd is None:
                raise TypeError("OobleckVaePatcher: give the Oobleck VAE or its state dict (sd=...)")
            state = oobleck_state_dict(sd)
            model = OobleckVAE(OobleckConfig.detect_from_weights(state), dtype=dtype or torch.float32)
            model.load_state_dict({k: v.to(dtype or torch.float32) for k, v in state.items()}, strict=True)
            model.eval()
        if not isinstance(model, OobleckVAE):
            raise TypeError(f"OobleckVaePatcher: expected an OobleckVAE, got {type(model).__name__}")
        VaePatcher.__init__(self, model, load_device if load_device is not None else device, offload_device,
                            cache_patched_weights=cache_patched_weights)

    @property
    def latent_channels(self) -> int:
        return int(self.model.config.latent_dim)

    @property
    def latent_dim(self) -> int:
        return 1

    @property
    def output_channels(self) -> int:  # type: ignore[override]
        return int(self.model.config.audio_channels)

    @property
    def upscale_ratio(self) -> int:  # type: ignore[override]
        return int(self.model.config.downscale)

    @property
    def downscale_ratio(self) -> int:  # type: ignore[override]
        return int(self.model.config.downscale)

    @property
    def audio_sample_rate_output(self) -> int:
        return self.audio_sample_rate

    @property
    def autoencoder(self) -> Any:
        return self.model

    def memory_used_encode(self, shape: tuple[int, ...], dtype: torch.dtype) -> int:
        """ComfyUI's estimate: 1000 bytes-of-dtype per input sample."""
        return int(1000 * shape[2] * torch.empty((), dtype=dtype).element_size())

    def memory_used_decode(self, shape: tuple[int, ...], dtype: torch.dtype) -> int:
        return int(1000 * shape[2] * 2048 * torch.empty((), dtype=dtype).element_size())

    def encode(self, audio: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """Waveform `[B, S, C]` at 44.1 kHz -> latent `[B, 64, S / 2048]` (sampled, float32)."""
        if audio.ndim != 3:
            raise OobleckInputError(f"Oobleck VAE encode: expected a waveform [B, S, C], got {tuple(audio.shape)}")
        with torch.no_grad(), self.applied() as vae:
            waveform = audio.movedim(-1, 1).to(self.load_device, self.vae_dtype)
            return vae.encode(waveform).float().to(self.offload_device)

    def decode(self, latent: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """Latent `[B, 64, T]` -> waveform `[B, T * 2048, C]` (float32)."""
        with torch.no_grad(), self.applied() as vae:
            out = vae.decode(latent.to(self.load_device, self.vae_dtype)).float()
        return out.to(self.offload_device).movedim(1, -1)

    def decode_tiled(self, samples: torch.Tensor, tile_x: int | None = None, tile_y: int | None = None,  # type: ignore[override]
                     overlap: int | None = None, tile_t: int | None = None, overlap_t: int | None = None,
                     **_: Any) -> torch.Tensor:
        """ComfyUI's `decode_tiled_1d` (see the module docstring); `[B, S, C]` as `decode`."""
        from comfy_core.models.vae_tiling import Axis, tiled_nd

        tile = int(tile_x if tile_x is not None else 128)
        lap = int(overlap if overlap is not None else 32)
        if samples.ndim != 3:
            raise OobleckInputError(f"Oobleck VAE decode_tiled: expected a latent [B, C, T], got {tuple(samples.shape)}")
        if tile < 1 or lap < 0 or lap >= tile:
            raise OobleckInputError(f"Oobleck VAE decode_tiled: need tile >= 1 and 0 <= overlap < tile, "
                                    f"got tile {tile}, overlap {lap}")
        with torch.no_grad(), self.applied() as vae:
            def run(piece: torch.Tensor) -> torch.Tensor:
                return vae.decode(piece.to(self.load_device, self.vae_dtype)).float()

            ratio = self.upscale_ratio
            axis = Axis(tile, lap, size=lambda n: n * ratio, place=lambda p: p * ratio)
            out = tiled_nd(samples, run, [axis], self.output_channels, self.offload_device)
        return out.movedim(1, -1)


STATE_DICT_KINDS.append((is_oobleck_vae, OobleckVaePatcher))
