"""ComfyUI's `comfy.supported_models` config classes of SDXL, its refiner and instruct-pix2pix (its
`supported_models.py`): what `model.model.model_config` is for this family, so packs read
`unet_config`, `latent_format`, `sampling_settings`, `memory_usage_factor` and `isinstance(config,
comfy.supported_models.X)` holds exactly when ComfyUI's would. The family names its class
(`Family.supported_model`); the values are read from the loaded model
(`comfy_core.models.model_config.config_for`)."""
from __future__ import annotations

from comfy_core.families.sdxl.latent_format import SDXL as SDXLLatentFormat
from comfy_core.models.model_config import BASE


class SDXLRefiner(BASE):
    unet_config = {"model_channels": 384, "use_linear_in_transformer": True, "context_dim": 1280,
                   "adm_in_channels": 2560, "transformer_depth": [0, 0, 4, 4, 4, 4, 0, 0],
                   "use_temporal_attention": False}
    latent_format = SDXLLatentFormat
    memory_usage_factor = 1.0


class SDXL(BASE):
    unet_config = {"model_channels": 320, "use_linear_in_transformer": True,
                   "transformer_depth": [0, 0, 2, 2, 10, 10], "context_dim": 2048, "adm_in_channels": 2816,
                   "use_temporal_attention": False}
    latent_format = SDXLLatentFormat
    memory_usage_factor = 0.8


class SDXL_instructpix2pix(SDXL):
    unet_config = {**SDXL.unet_config, "in_channels": 8}
