"""ComfyUI's `comfy.supported_models` config classes of SD3 / SD3.5 (its `supported_models.py`): what
`model.model.model_config` is for this family, so packs read `unet_config`, `latent_format`,
`sampling_settings`, `memory_usage_factor` and `isinstance(config, comfy.supported_models.X)` holds
exactly when ComfyUI's would. The family names its class (`Family.supported_model`); the values are
read from the loaded model (`comfy_core.models.model_config.config_for`)."""
from __future__ import annotations

from typing import Any

from comfy_core.families.sd3.latent_format import SD3 as SD3LatentFormat
from comfy_core.models.model_config import BASE


class SD3(BASE):
    """SD3 / SD3.5 (MMDiT): ComfyUI matches any 16-channel MMDiT config (`pos_embed_scaling_factor`
    is a key only MMDiT configs have)."""

    unet_config = {"in_channels": 16, "pos_embed_scaling_factor": None}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings = {"shift": 3.0}
    latent_format = SD3LatentFormat
    memory_usage_factor = 1.2
    text_encoder_key_prefix = ["text_encoders."]
