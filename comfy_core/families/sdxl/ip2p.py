"""SDXL instruct-pix2pix (diffusers' `sdxl-instructpix2pix-768` as a single file): the SDXL base
UNet with an 8-channel input, the noisy latent followed by the unscaled latent of the image to
edit (ComfyUI's `SDXL_instructpix2pix` for eps/v models; CosXL's EDM variant is not supported
here). Detected by `input_blocks.0.0.weight` taking 8 channels."""
from __future__ import annotations

import dataclasses

from comfy_core.families import sdxl
from comfy_core.families.base import Family
from comfy_core.families.sdxl import supported_models


def definition() -> Family:
    base = sdxl.definition()
    return dataclasses.replace(
        base, name="sdxl_ip2p", display_name="Stable Diffusion XL instruct-pix2pix",
        signature=dataclasses.replace(
            base.signature, unet=tuple((k, 8 if k == "in_channels" else v) for k, v in base.signature.unet)),
        concat="ip2p",
        supported_model=supported_models.SDXL_instructpix2pix,
        modelspec_architecture="stable-diffusion-xl-v1-edit",
        comfy_model_class="SDXL_instructpix2pix",
    )
