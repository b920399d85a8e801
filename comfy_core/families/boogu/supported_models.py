"""ComfyUI's `comfy.supported_models.Boogu` config class (a subclass of its `Omnigen2`): what
`model.model.model_config` is for this family, so packs read `unet_config`, `latent_format`,
`sampling_settings`, `memory_usage_factor` and `isinstance(config, comfy.supported_models.Boogu)`
(and `Omnigen2`) holds exactly when ComfyUI's would. Its models are ComfyUI's `model_base.Boogu`
(a subclass of `model_base.Omnigen2`, model type FLOW)."""
from __future__ import annotations

from comfy_core.families.omnigen2.supported_models import Omnigen2

BOOGU_SHIFT = 3.16
BOOGU_MULTIPLIER = 1.0


class Boogu(Omnigen2):
    """Boogu-Image: flow (CONST) sampling with shift 3.16, multiplier 1; Flux's latents."""

    unet_config = {"image_model": "boogu"}
    sampling_settings = {"multiplier": BOOGU_MULTIPLIER, "shift": BOOGU_SHIFT}
    memory_usage_factor = 2.15
