"""`AudioVaePatcher`: the VAE wire object over LTX-2's audio VAE (`comfy_core.models.ltx_audio_vae`).

It answers as ComfyUI's `comfy.sd.VAE` does when built from an LTX audio VAE file: `encode` takes
a waveform laid out `[B, S, C]` (ComfyUI's `VAEEncodeAudio` moves channels last) at
`audio_sample_rate` (44100 Hz, the rate ComfyUI's audio nodes resample to when a VAE names none)
and returns the normalised latent `[B, 8, T, 16]`; `decode` returns `[B, S, C]` at
`audio_sample_rate_output` (the vocoder's rate); `latent_channels`, `latent_dim` 2,
`output_channels` 2, `first_stage_model` (whose `output_sample_rate`, `latent_frequency_bins`,
`num_of_latents_from_frames` the LTXV audio nodes read) and `autoencoder` (the LTXV node pack reads
it) as ComfyUI sets them. Weight patches apply inside `applied()` as for every patcher.

`decode_tiled(samples, tile_y=..., overlap=...)` decodes `tile_y` latent frames at a time; the
decoder is causal along time, so a tile starting at latent frame `t0` covers mel frames from
`4 t0` on, and tiles are cross-faded linearly over their `overlap` frames in output samples.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

from comfy_core.models.ltx_audio_vae import (LATENT_DOWNSAMPLE_FACTOR, AudioVAEInputError, LTXAudioVAE,
                                             is_ltx_audio_vae, ltx_audio_vae_from_state_dict)
from comfy_core.patching.vae import STATE_DICT_KINDS, VaeConstructionError, VaePatcher

INPUT_SAMPLE_RATE = 44100  # ComfyUI's audio nodes' rate for a VAE without `audio_sample_rate`


class AudioVaePatcher(VaePatcher):
    """Patcher for `LTXAudioVAE`; ComfyUI's audio-VAE attributes and encode/decode layouts."""

    audio_sample_rate = INPUT_SAMPLE_RATE
    output_channels = 2
    pad_channel_value = "replicate"
    upscale_ratio = 4096  # ComfyUI's constants for this VAE (comfy/sd.py)
    downscale_ratio = 4096

    def __init__(self, model: LTXAudioVAE | Mapping[str, torch.Tensor] | None = None,
                 load_device: torch.device | str | None = None, offload_device: torch.device | str | None = None,
                 *, sd: Mapping[str, torch.Tensor] | None = None, device: torch.device | str | None = None,
                 config: Any = None, dtype: torch.dtype | None = None, metadata: Mapping[str, str] | None = None,
                 cache_patched_weights: bool = True) -> None:
        """A built `LTXAudioVAE`, or (ComfyUI's `comfy.sd.VAE(sd=..., metadata=...)`) the file's
        tensors and metadata; float32 whatever `dtype` asks, as ComfyUI runs this VAE."""
        if config is not None:
            raise VaeConstructionError("comfy.sd.VAE(config=...) with an LTX audio VAE state dict: the audio "
                                       "VAE's architecture comes from the file's metadata (metadata=...)")
        if isinstance(model, Mapping):
            model, sd = None, model
        if model is None:
            if sd is None:
                raise TypeError("AudioVaePatcher: give the LTX audio VAE or its state dict (sd=...) and metadata")
            model = ltx_audio_vae_from_state_dict(sd, metadata)
        if not isinstance(model, LTXAudioVAE):
            raise TypeError(f"AudioVaePatcher: expected an LTXAudioVAE, got {type(model).__name__}")
        super().__init__(model, load_device if load_device is not None else device, offload_device,
                         cache_patched_weights=cache_patched_weights)

    @property
    def latent_channels(self) -> int:
        return int(self.model.latent_channels)

    @property
    def latent_dim(self) -> int:
        return 2

    @property
    def audio_sample_rate_output(self) -> int:
        return int(self.model.output_sample_rate)

    @property
    def autoencoder(self) -> Any:
        return self.model.autoencoder

    @staticmethod
    def process_input(audio: torch.Tensor) -> torch.Tensor:
        return audio

    @staticmethod
    def process_output(audio: torch.Tensor) -> torch.Tensor:
        return audio

    def memory_used_encode(self, shape: tuple[int, ...], dtype: torch.dtype) -> int:
        """ComfyUI's estimate for this VAE: 330 bytes-of-dtype per input sample."""
        return int(shape[2] * 330 * torch.empty((), dtype=dtype).element_size())

    def memory_used_decode(self, shape: tuple[int, ...], dtype: torch.dtype) -> int:
        return int(shape[2] * shape[3] * 87000 * torch.empty((), dtype=dtype).element_size())

    def encode(self, audio: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """Waveform `[B, S, C]` at `audio_sample_rate` -> normalised latent `[B, z, T, F]`."""
        if audio.ndim != 3:
            raise AudioVAEInputError(f"audio VAE encode: expected a waveform [B, S, C], got {tuple(audio.shape)}")
        with torch.no_grad(), self.applied() as vae:
            waveform = audio.movedim(-1, 1).to(self.load_device)
            return vae.encode(waveform, self.audio_sample_rate).to(self.offload_device)

    def decode(self, latent: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """Normalised latent `[B, z, T, F]` -> waveform `[B, S, C]` at `audio_sample_rate_output`."""
        with torch.no_grad(), self.applied() as vae:
            return vae.decode(latent.to(self.load_device)).to(self.offload_device).movedim(1, -1)

    def decode_tiled(self, samples: torch.Tensor, tile_x: int | None = None, tile_y: int | None = None,  # type: ignore[override]
                     overlap: int | None = None, tile_t: int | None = None, overlap_t: int | None = None,
                     **_: Any) -> torch.Tensor:
        """Decode `tile_y` latent frames at a time (default 512), tiles overlapping by `overlap`
        frames (default 64) and cross-faded; `[B, S, C]` as `decode`."""
        tile = int(tile_y if tile_y is not None else 512)
        lap = int(overlap if overlap is not None else 64)
        if tile < 2 or lap < 0 or lap >= tile:
            raise AudioVAEInputError(f"audio VAE decode_tiled: need tile >= 2 and 0 <= overlap < tile, "
                                     f"got tile {tile}, overlap {lap}")
        frames = samples.shape[2]
        if frames <= tile:
            return self.decode(samples)
        model: LTXAudioVAE = self.model  # type: ignore[assignment]
        per_mel = model.output_sample_rate * model.mel_hop_length / model.sample_rate  # output samples per mel frame
        starts = list(range(0, frames - lap, tile - lap))
        with torch.no_grad(), self.applied() as vae:
            pieces = [(start, vae.decode(samples[:, :, start:start + tile].to(self.load_device)).float())
                      for start in starts]
        length = round(model.decoded_frames(frames) * per_mel)
        first = pieces[0][1]
        out = torch.zeros(first.shape[0], first.shape[1], length, device=first.device)
        weight = torch.zeros(length, device=first.device)
        for start, wave in pieces:
            offset = 0 if start == 0 else round(LATENT_DOWNSAMPLE_FACTOR * start * per_mel)
            n = min(wave.shape[-1], length - offset)
            ramp = torch.ones(n, device=wave.device)
            fade = min(n, round(LATENT_DOWNSAMPLE_FACTOR * lap * per_mel)) if start else 0
            if fade:
                ramp[:fade] = torch.linspace(0.0, 1.0, fade + 2, device=wave.device)[1:-1]
            out[..., offset:offset + n] += wave[..., :n] * ramp
            weight[offset:offset + n] += ramp
        return (out / weight.clamp_min(1e-8)).to(self.offload_device).movedim(1, -1)


STATE_DICT_KINDS.append((is_ltx_audio_vae, AudioVaePatcher))
