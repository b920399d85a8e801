"""ComfyUI's `comfy.supported_models.MingImage` config class (a subclass of its `ZImage`): what
`model.model.model_config` is for Ming-Image, so packs read `unet_config`, `latent_format`,
`sampling_settings`, `memory_usage_factor` and `isinstance(config, comfy.supported_models.ZImage)`
holds as in ComfyUI. Its models are ComfyUI's `model_base.MingImage`."""
from __future__ import annotations

from comfy_core.families.ming_image.latent_format import MingImage as MingImageLatentFormat
from comfy_core.families.zimage.supported_models import ZImage

MING_SHIFT = 3.16  # ComfyUI: the reference's dynamic shift at the 1024 bucket


class MingImage(ZImage):
    """Ming-Image 0.1 Design: flow (CONST) sampling, shift 3.16, multiplier 1; its own latent format."""

    unet_config = {"image_model": "ming_image"}
    sampling_settings = {"multiplier": 1.0, "shift": MING_SHIFT}
    latent_format = MingImageLatentFormat
