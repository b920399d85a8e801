"""SD1.x instruct-pix2pix (Brooks et al. 2023, "InstructPix2Pix: Learning to Follow Image Editing
Instructions"): the SD1 UNet with an 8-channel input, the noisy latent followed by the latent of
the image to edit, unscaled (ComfyUI's `SD15_instructpix2pix`). Detected by
`input_blocks.0.0.weight` taking 8 channels."""
from __future__ import annotations

import dataclasses

from comfy_core.families import sd1
from comfy_core.families.base import Family
from comfy_core.families.sd1 import supported_models


def definition() -> Family:
    base = sd1.definition()
    return dataclasses.replace(
        base, name="sd1_ip2p", display_name="Stable Diffusion 1.x instruct-pix2pix",
        signature=dataclasses.replace(
            base.signature, unet=tuple((k, 8 if k == "in_channels" else v) for k, v in base.signature.unet)),
        concat="ip2p",
        supported_model=supported_models.SD15_instructpix2pix,
        comfy_model_class="SD15_instructpix2pix",
    )
