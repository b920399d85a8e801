"""SD2.x inpainting (Stability's `512-inpainting-ema`): the SD2 UNet with a 9-channel input (noisy
latent, mask, masked-image latent). Always eps-prediction: ComfyUI reads SD2's v-prediction
marker only for 4-channel UNets (`supported_models.SD20.model_type`)."""
from __future__ import annotations

import dataclasses

from comfy_core.families import sd2
from comfy_core.families.base import Family, SamplingPolicy


def definition() -> Family:
    base = sd2.definition()
    return dataclasses.replace(
        base, name="sd2_inpaint", display_name="Stable Diffusion 2.x inpainting",
        signature=dataclasses.replace(
            base.signature, unet=tuple((k, 9 if k == "in_channels" else v) for k, v in base.signature.unet)),
        sampling=SamplingPolicy(prediction="eps"), prediction_from_weights=None, concat="inpaint",
    )
