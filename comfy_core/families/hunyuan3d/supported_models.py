"""ComfyUI's `comfy.supported_models.Hunyuan3Dv2` / `Hunyuan3Dv2mini` / `Hunyuan3Dv2_1` config classes:
what `model.model.model_config` is for Hunyuan3D, so packs read `unet_config`, `latent_format`,
`sampling_settings`, `memory_usage_factor` and `isinstance(config, comfy.supported_models.Hunyuan3Dv2)`
holds as in ComfyUI (2.1 and mini are its subclasses there too)."""
from __future__ import annotations

from typing import Any

from comfy_core.families.hunyuan3d.latent_format import Hunyuan3Dv2 as Hunyuan3Dv2Latent
from comfy_core.families.hunyuan3d.latent_format import Hunyuan3Dv2_1 as Hunyuan3Dv2_1Latent
from comfy_core.families.hunyuan3d.latent_format import Hunyuan3Dv2mini as Hunyuan3Dv2miniLatent
from comfy_core.models.model_config import BASE


class Hunyuan3Dv2(BASE):
    """Rectified flow, shift 1, multiplier 1; the DINOv2 under `conditioner.main_image_encoder.model.`."""

    unet_config = {"image_model": "hunyuan3d2"}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings = {"multiplier": 1.0, "shift": 1.0}
    memory_usage_factor = 3.5
    clip_vision_prefix = "conditioner.main_image_encoder.model."
    vae_key_prefix = ["vae."]
    latent_format = Hunyuan3Dv2Latent


class Hunyuan3Dv2_1(Hunyuan3Dv2):
    unet_config = {"image_model": "hunyuan3d2_1"}
    latent_format = Hunyuan3Dv2_1Latent


class Hunyuan3Dv2mini(Hunyuan3Dv2):
    unet_config = {"image_model": "hunyuan3d2", "depth": 8}
    latent_format = Hunyuan3Dv2miniLatent
