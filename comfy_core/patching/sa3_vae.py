"""`SA3VaePatcher`: the VAE wire object over Stable Audio 3's SAME VAE (`comfy_core.models.sa3_vae`).

It answers as ComfyUI's `comfy.sd.VAE` does for an `SA3AudioVAE`: `encode` takes a waveform
`[B, S, C]` (ComfyUI's `VAEEncodeAudio` moves channels last) at 44.1 kHz and returns the latent
`[B, 256, ceil(S / 4096)]`; `decode` returns `[B, T x 4096, C]`; `latent_channels` 256,
`latent_dim` 1, `output_channels` 2, `upscale_ratio` / `downscale_ratio` 4096 (from the weights).
Built, encoded, decoded and tiled as a `WaveformVaePatcher` (comfy_core/patching/waveform_vae.py).
"""
from __future__ import annotations

from comfy_core.models.sa3_vae import SAMPLE_RATE, SA3VAE, SA3VAEConfig, SA3VAEInputError, is_sa3_vae
from comfy_core.patching.vae import STATE_DICT_KINDS
from comfy_core.patching.waveform_vae import WaveformVaePatcher


class SA3VaePatcher(WaveformVaePatcher):
    """Patcher for `SA3VAE`; see the module docstring."""

    network = SA3VAE
    network_config = SA3VAEConfig
    title = "Stable Audio 3 VAE"
    input_error = SA3VAEInputError
    audio_sample_rate = SAMPLE_RATE


STATE_DICT_KINDS.append((is_sa3_vae, SA3VaePatcher))
