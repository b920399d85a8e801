"""`OobleckVaePatcher`: the VAE wire object over the Oobleck audio VAE (`comfy_core.models.oobleck_vae`).

It answers as ComfyUI's `comfy.sd.VAE` does for a Stable Audio VAE (`AudioOobleckVAE`): `encode`
takes a waveform `[B, S, C]` (ComfyUI's `VAEEncodeAudio` moves channels last) at 44.1 kHz and
returns the sampled latent `[B, 64, S / 2048]`; `decode` returns `[B, S, C]`; `latent_channels`
64, `latent_dim` 1, `output_channels` 2, `upscale_ratio` / `downscale_ratio` 2048 (from the
weights), ComfyUI's memory estimates and 1-D tiled decode: a `WaveformVaePatcher`
(comfy_core/patching/waveform_vae.py), so the audio nodes take it.
"""
from __future__ import annotations

from comfy_core.models.oobleck_vae import OobleckConfig, OobleckInputError, OobleckVAE, is_oobleck_vae, \
    oobleck_state_dict
from comfy_core.patching.audio_vae import INPUT_SAMPLE_RATE
from comfy_core.patching.vae import STATE_DICT_KINDS
from comfy_core.patching.waveform_vae import WaveformVaePatcher


ACE15_STRIDES = (2, 4, 4, 6, 10)  # ACE-Step 1.5's VAE: 1920 samples a frame at 48 kHz
ACE15_SAMPLE_RATE = 48000


class OobleckVaePatcher(WaveformVaePatcher):
    """Patcher for `OobleckVAE`; see the module docstring."""

    network = OobleckVAE
    network_config = OobleckConfig
    title = "Oobleck VAE"
    input_error = OobleckInputError
    prepared_state = staticmethod(oobleck_state_dict)

    @property
    def audio_sample_rate(self) -> int:  # type: ignore[override]
        """44.1 kHz (Stable Audio's); 48 kHz for ACE-Step 1.5's strides (ComfyUI tells them apart by
        the second decoder block's 12-tap kernel, a stride of 6)."""
        return ACE15_SAMPLE_RATE if tuple(self.model.config.strides) == ACE15_STRIDES else INPUT_SAMPLE_RATE

    @property
    def output_channels(self) -> int:  # type: ignore[override]
        return int(self.model.config.audio_channels)


STATE_DICT_KINDS.append((is_oobleck_vae, OobleckVaePatcher))
