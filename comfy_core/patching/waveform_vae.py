"""`WaveformVaePatcher`: what the audio VAEs whose latent is one sequence of frames share (Stable
Audio's / ACE-Step 1.5's Oobleck VAE, Stable Audio 3's SAME VAE): built from the weights as
ComfyUI's `comfy.sd.VAE(sd=...)` builds them, `encode` a waveform `[B, S, C]` (ComfyUI's
`VAEEncodeAudio` moves channels last) into the latent `[B, latent_dim, frames]`, `decode` back to
`[B, frames x downscale, C]` (float32), and `decode_tiled` as ComfyUI's `decode_tiled_1d`: `tile_x`
latent frames at a time (default 128) overlapping by `overlap` (default 32), blended by
`comfy_core.models.vae_tiling.tiled_nd` (a `tile_y` is ignored, as ComfyUI pops it for 1-D
latents). `latent_channels`, `upscale_ratio` / `downscale_ratio` come from the network's config
(`latent_dim`, `downscale`); memory estimates are ComfyUI's (1000 bytes-of-dtype a sample).

A subclass names its `network` class (its config class `network_config`, with
`detect_from_weights(state)`), `title` for messages, `input_error` (the network's typed input error)
and may convert the state dict (`prepared_state`). It is an `AudioVaePatcher`, so the audio nodes
take it; weight patches apply inside `applied()`.
"""
from __future__ import annotations

from typing import Any, ClassVar, Mapping

import torch
from torch import nn

from comfy_core.patching.audio_vae import AudioVaePatcher
from comfy_core.patching.vae import VaeConstructionError, VaePatcher


class WaveformVaePatcher(AudioVaePatcher):
    """See the module docstring."""

    network: ClassVar[type[nn.Module]]
    network_config: ClassVar[Any]
    title: ClassVar[str]
    input_error: ClassVar[type[Exception]]

    @staticmethod
    def prepared_state(sd: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The state dict in the network's names (default: as given)."""
        return dict(sd)

    def __init__(self, model: nn.Module | Mapping[str, torch.Tensor] | None = None,
                 load_device: torch.device | str | None = None, offload_device: torch.device | str | None = None,
                 *, sd: Mapping[str, torch.Tensor] | None = None, device: torch.device | str | None = None,
                 config: Any = None, dtype: torch.dtype | None = None, metadata: Mapping[str, str] | None = None,
                 cache_patched_weights: bool = True) -> None:
        """A built network, or (ComfyUI's `comfy.sd.VAE(sd=...)`) its state dict."""
        name = type(self).__name__
        if config is not None:
            raise VaeConstructionError(f"comfy.sd.VAE(config=...) with a {self.title} state dict: its architecture "
                                       "is read from the weights")
        if isinstance(model, Mapping):
            model, sd = None, model
        if model is None:
            if sd is None:
                raise TypeError(f"{name}: give the {self.title} or its state dict (sd=...)")
            state = self.prepared_state(sd)
            model = self.network(self.network_config.detect_from_weights(state), dtype=dtype or torch.float32)
            model.load_state_dict({k: v.to(dtype or torch.float32) for k, v in state.items()}, strict=True)
            model.eval()
        if not isinstance(model, self.network):
            raise TypeError(f"{name}: expected a {self.network.__name__}, got {type(model).__name__}")
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
        return self.audio_sample_rate

    @property
    def autoencoder(self) -> Any:
        return self.model

    def memory_used_encode(self, shape: tuple[int, ...], dtype: torch.dtype) -> int:
        """ComfyUI's estimate: 1000 bytes-of-dtype per input sample."""
        return int(1000 * shape[2] * torch.empty((), dtype=dtype).element_size())

    def memory_used_decode(self, shape: tuple[int, ...], dtype: torch.dtype) -> int:
        return int(1000 * shape[2] * self.upscale_ratio * torch.empty((), dtype=dtype).element_size())

    def encode(self, audio: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """Waveform `[B, S, C]` at `audio_sample_rate` -> latent `[B, latent_channels, frames]` (float32)."""
        if audio.ndim != 3:
            raise self.input_error(f"{self.title} encode: expected a waveform [B, S, C], got {tuple(audio.shape)}")
        with torch.no_grad(), self.applied() as vae:
            waveform = audio.movedim(-1, 1).to(self.load_device, self.vae_dtype)
            return vae.encode(waveform).float().to(self.offload_device)

    def decode(self, latent: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """Latent `[B, latent_channels, T]` -> waveform `[B, T x upscale_ratio, C]` (float32)."""
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
            raise self.input_error(f"{self.title} decode_tiled: expected a latent [B, C, T], got "
                                   f"{tuple(samples.shape)}")
        if tile < 1 or lap < 0 or lap >= tile:
            raise self.input_error(f"{self.title} decode_tiled: need tile >= 1 and 0 <= overlap < tile, "
                                   f"got tile {tile}, overlap {lap}")
        with torch.no_grad(), self.applied() as vae:
            def run(piece: torch.Tensor) -> torch.Tensor:
                return vae.decode(piece.to(self.load_device, self.vae_dtype)).float()

            ratio = self.upscale_ratio
            axis = Axis(tile, lap, size=lambda n: n * ratio, place=lambda p: p * ratio)
            out = tiled_nd(samples, run, [axis], self.output_channels, self.offload_device)
        return out.movedim(1, -1)
