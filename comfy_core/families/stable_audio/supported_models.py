"""ComfyUI's `comfy.supported_models.StableAudio` config class: what `model.model.model_config` is
for Stable Audio Open, so packs read `unet_config`, `latent_format`, `sampling_settings` and
`isinstance(config, comfy.supported_models.StableAudio)` holds as in ComfyUI."""
from __future__ import annotations

from typing import Any

from comfy_core.families.stable_audio.latent_format import StableAudio1, StableAudio3 as StableAudio3Latent
from comfy_core.models.model_config import BASE


class StableAudio(BASE):
    """Stable Audio Open 1.0: continuous-time v-prediction, sigmas 0.03 .. 500."""

    unet_config = {"audio_model": "dit1.0"}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings = {"sigma_max": 500.0, "sigma_min": 0.03}
    latent_format = StableAudio1
    vae_key_prefix = ["pretransform.model."]
    text_encoder_key_prefix = ["text_encoders."]


class StableAudio3(StableAudio):
    """Stable Audio 3: rectified flow, shift 2, multiplier 1; the shared AdaLN DiT."""

    unet_config = {"audio_model": "dit1.0", "global_cond_shared_embed": True}
    sampling_settings = {"multiplier": 1.0, "shift": 2.0}
    latent_format = StableAudio3Latent
    memory_usage_factor = 7
