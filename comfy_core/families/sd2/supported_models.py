"""ComfyUI's `comfy.supported_models` config classes of SD2.x and SD2.1 unCLIP (its
`supported_models.py`): what `model.model.model_config` is for this family, so packs read
`unet_config`, `latent_format`, `sampling_settings`, `memory_usage_factor` and `isinstance(config,
comfy.supported_models.X)` holds exactly when ComfyUI's would. The family names its class
(`Family.supported_model`); the values are read from the loaded model
(`comfy_core.models.model_config.config_for`)."""
from __future__ import annotations

import torch

from comfy_core.models import latent_formats
from comfy_core.models.model_config import BASE


class SD20(BASE):
    unet_config = {"context_dim": 1024, "model_channels": 320, "use_linear_in_transformer": True,
                   "adm_in_channels": None, "use_temporal_attention": False}
    unet_extra_config = {"num_heads": -1, "num_head_channels": 64, "attn_precision": torch.float32}
    latent_format = latent_formats.SD15
    memory_usage_factor = 1.0


class LotusD(SD20):
    unet_config = {"model_channels": 320, "use_linear_in_transformer": True, "use_temporal_attention": False,
                   "adm_in_channels": 4, "in_channels": 4}
    unet_extra_config = {"num_classes": "sequential"}


class SD21UnclipH(SD20):
    unet_config = {"context_dim": 1024, "model_channels": 320, "use_linear_in_transformer": True,
                   "adm_in_channels": 2048, "use_temporal_attention": False}
    clip_vision_prefix = "embedder.model.visual."
    noise_aug_config = {"noise_schedule_config": {"timesteps": 1000, "beta_schedule": "squaredcos_cap_v2"},
                        "timestep_dim": 1024}
