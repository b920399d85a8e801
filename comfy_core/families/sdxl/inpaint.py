"""SDXL inpainting (`diffusers/stable-diffusion-xl-1.0-inpainting-0.1` as a single file): the SDXL
base UNet with a 9-channel input (noisy latent, mask, masked-image latent), SDXL's label
embedding and text encoders. Detected by `input_blocks.0.0.weight` taking 9 channels."""
from __future__ import annotations

import dataclasses

from comfy_core.families import sdxl
from comfy_core.families.base import Family


def definition() -> Family:
    base = sdxl.definition()
    return dataclasses.replace(
        base, name="sdxl_inpaint", display_name="Stable Diffusion XL inpainting",
        signature=dataclasses.replace(
            base.signature, unet=tuple((k, 9 if k == "in_channels" else v) for k, v in base.signature.unet)),
        concat="inpaint",
    )
