"""ComfyUI's `comfy.supported_models.LTXAV` config class (a subclass of its `LTXV`): what
`model.model.model_config` is for LTX-2, so packs read `unet_config` (`image_model` "ltxav"),
`latent_format`, `sampling_settings` (LTXV's shift 2.37, inherited), `memory_usage_factor` and
`isinstance(config, comfy.supported_models.LTXAV)` / `LTXV` holds as in ComfyUI."""
from __future__ import annotations

from typing import Any

from comfy_core.families.ltx2.latent_format import LTXAV as LTXAVFormat
from comfy_core.families.ltxv.supported_models import LTXV

LTXAV_MEMORY_FACTOR = 0.077  # ComfyUI's constant (marked TODO there), not LTXV's width rule


class LTXAV(LTXV):
    """LTX-2: LTXV's sampling and dtypes, the LTXAV latent format, memory factor 0.077."""

    unet_config = {"image_model": "ltxav"}
    latent_format = LTXAVFormat
    memory_usage_factor = LTXAV_MEMORY_FACTOR

    def __init__(self, unet_config: dict[str, Any]) -> None:
        super().__init__(unet_config)
        self.memory_usage_factor = LTXAV_MEMORY_FACTOR
