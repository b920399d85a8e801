"""ComfyUI's `comfy.supported_models` config classes of Stable Video Diffusion img2vid (its
`supported_models.py`): what `model.model.model_config` is for this family, so packs read
`unet_config`, `latent_format`, `sampling_settings`, `memory_usage_factor` and `isinstance(config,
comfy.supported_models.X)` holds exactly when ComfyUI's would. The family names its class
(`Family.supported_model`); the values are read from the loaded model
(`comfy_core.models.model_config.config_for`)."""
from __future__ import annotations

import torch

from comfy_core.models import latent_formats
from comfy_core.models.model_config import BASE


class SVD_img2vid(BASE):
    unet_config = {"model_channels": 320, "in_channels": 8, "use_linear_in_transformer": True,
                   "transformer_depth": [1, 1, 1, 1, 1, 1, 0, 0], "context_dim": 1024, "adm_in_channels": 768,
                   "use_temporal_attention": True, "use_temporal_resblock": True}
    unet_extra_config = {"num_heads": -1, "num_head_channels": 64, "attn_precision": torch.float32}
    clip_vision_prefix = "conditioner.embedders.0.open_clip.model.visual."
    latent_format = latent_formats.SD15
    sampling_settings = {"sigma_max": 700.0, "sigma_min": 0.002}
