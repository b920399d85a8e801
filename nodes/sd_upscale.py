"""SD_4XUpscale_Conditioning, the Stable Diffusion x4 upscaler's conditioning with ComfyUI 0.3.64's
name, sockets and semantics (comfy_extras/nodes_sdupscale.py): the images mapped to -1..1 and
resized (bilinear, centre crop) to a quarter of the output size, `round(side * scale_ratio)`
(at least 1), as every entry's `concat_image` with its `noise_augmentation`; a zero latent of
4 channels at a quarter of the output size (the upscaler's VAE compresses 4x).
"""
from __future__ import annotations

from typing import Any

from graph.native import Float, Input, Output, node
import nodes.checks as checks
from nodes.errors import NodeInputError


@node("SD_4XUpscale_Conditioning", display_name=None, category="conditioning/upscale_diffusion",
      python_module="comfy_extras.nodes_sdupscale",
      inputs=[Input("images", "IMAGE"), Input("positive", "CONDITIONING"), Input("negative", "CONDITIONING"),
              Float("scale_ratio", default=4.0, min=0.0, max=10.0, step=0.01),
              Float("noise_augmentation", default=0.0, min=0.0, max=1.0, step=0.001)],
      outputs=[Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative"), Output("LATENT", "latent")])
def sd_4x_upscale_conditioning(images: Any, positive: list, negative: list, scale_ratio: float,
                               noise_augmentation: float) -> tuple[list, list, dict]:
    import torch
    from comfy_core.image.resize import upscale_samples
    from nodes.wan_conditioning import both, conditionings

    images = checks.image_batch(images, "images")
    positive, negative = conditionings(positive, negative)
    scale_ratio = checks.number(scale_ratio, "scale_ratio")
    noise_augmentation = checks.number(noise_augmentation, "noise_augmentation")
    width = max(1, round(images.shape[2] * scale_ratio))
    height = max(1, round(images.shape[1] * scale_ratio))
    if width < 4 or height < 4:
        raise NodeInputError("scale_ratio", "a ratio that makes the output at least 4 pixels a side "
                                            "(the upscaler works on a quarter of it)", repr(scale_ratio))
    pixels = upscale_samples(images.movedim(-1, 1) * 2.0 - 1.0, width // 4, height // 4, "bilinear", "center")
    positive, negative = both(positive, negative, {"concat_image": pixels, "noise_augmentation": noise_augmentation})
    return positive, negative, {"samples": torch.zeros([images.shape[0], 4, height // 4, width // 4])}
