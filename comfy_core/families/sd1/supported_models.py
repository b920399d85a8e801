"""ComfyUI's `comfy.supported_models` config classes of SD1.x (its `supported_models.py`): what
`model.model.model_config` is for this family, so packs read `unet_config`, `latent_format`,
`sampling_settings`, `memory_usage_factor` and `isinstance(config, comfy.supported_models.X)` holds
exactly when ComfyUI's would. The family names its class (`Family.supported_model`); the values are
read from the loaded model (`comfy_core.models.model_config.config_for`)."""
from __future__ import annotations

from comfy_core.models import latent_formats
from comfy_core.models.model_config import BASE


class SD15(BASE):
    unet_config = {"context_dim": 768, "model_channels": 320, "use_linear_in_transformer": False,
                   "adm_in_channels": None, "use_temporal_attention": False}
    unet_extra_config = {"num_heads": 8, "num_head_channels": -1}
    latent_format = latent_formats.SD15
    memory_usage_factor = 1.0


class SD15_instructpix2pix(SD15):
    unet_config = {**SD15.unet_config, "in_channels": 8}
