"""Flux.1 schnell (Black Forest Labs 2024): Flux's network without the guidance embedding, distilled
for 1-4 steps; sampled as ComfyUI's `supported_models.FluxSchnell`: rectified flow without time
shift (shift 1, timestep multiplier 1). Everything else is the `flux` package's."""
from __future__ import annotations

import dataclasses

from comfy_core.families import flux
from comfy_core.families.base import Family, SamplingPolicy, Signature
from comfy_core.families.flux import supported_models


def definition() -> Family:
    base = flux.definition()
    return dataclasses.replace(
        base, name="flux_schnell", display_name="Flux.1 schnell",
        signature=Signature(required_prefixes=base.signature.required_prefixes,
                            unet=(("guidance_embed", False),)),
        sampling=SamplingPolicy(prediction="flow", schedule="flow", shift=1.0, multiplier=1.0,
                                default_scheduler="simple"),
        supported_model=supported_models.FluxSchnell,
    )
