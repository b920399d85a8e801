"""SD1.x inpainting (RunwayML `sd-v1-5-inpainting` and its fine-tunes): the SD1 UNet with a
9-channel input, the noisy latent followed by the inpainting mask (1 channel) and the latent of
the masked image (4 channels), as ComfyUI's `BaseModel.set_inpaint` concatenates them. Detected
by `input_blocks.0.0.weight` taking 9 channels; otherwise SD1 in every respect."""
from __future__ import annotations

import dataclasses

from comfy_core.families import sd1
from comfy_core.families.base import Family


def definition() -> Family:
    base = sd1.definition()
    return dataclasses.replace(
        base, name="sd1_inpaint", display_name="Stable Diffusion 1.x inpainting",
        signature=dataclasses.replace(
            base.signature, unet=tuple((k, 9 if k == "in_channels" else v) for k, v in base.signature.unet)),
        concat="inpaint",
    )
