"""Stable Cascade's latent and conditioning nodes with ComfyUI 0.3.64's names, sockets and
semantics (comfy_extras/nodes_stable_cascade.py).

Stable Cascade samples twice: stage C (16 channels, `compression` pixels a cell: 42 by default)
then stage B (4 channels, 4 pixels a cell) conditioned on stage C's result.

- StableCascade_EmptyLatentImage: zeros for both stages.
- StableCascade_StageC_VAEEncode: the image resized (bicubic, centre crop) so that the stage C
  VAE's encoder (`downscale_ratio` pixels a cell) gives `W // compression x H // compression`
  cells, encoded; stage B zeros at `(H // 8) * 2 x (W // 8) * 2`.
- StableCascade_StageB_Conditioning: stage C's samples as each entry's `stable_cascade_prior`.
- StableCascade_SuperResolutionControlnet (experimental): the image encoded by the VAE as the
  ControlNet input image (channels last), zero stage C (`/16`) and stage B (`/2`) latents.
"""
from __future__ import annotations

from typing import Any

from graph.native import MAX_RESOLUTION, Input, Int, Output, node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe

MODULE = "comfy_extras.nodes_stable_cascade"
STAGE_C_CHANNELS, STAGE_B_CHANNELS = 16, 4


def _compression() -> Any:
    return Int("compression", default=42, min=4, max=128, step=1)


@node("StableCascade_EmptyLatentImage", display_name=None, category="latent/stable_cascade", python_module=MODULE,
      inputs=[Int("width", default=1024, min=256, max=MAX_RESOLUTION, step=8),
              Int("height", default=1024, min=256, max=MAX_RESOLUTION, step=8), _compression(),
              Int("batch_size", default=1, min=1, max=4096)],
      outputs=[Output("LATENT", "stage_c"), Output("LATENT", "stage_b")])
def stable_cascade_empty_latent_image(width: int, height: int, compression: int, batch_size: int = 1) -> tuple[dict, dict]:
    import torch

    width = checks.integer(width, "width", 256, MAX_RESOLUTION)
    height = checks.integer(height, "height", 256, MAX_RESOLUTION)
    compression = checks.integer(compression, "compression", 4, 128)
    batch_size = checks.integer(batch_size, "batch_size", 1, 4096)
    return ({"samples": torch.zeros([batch_size, STAGE_C_CHANNELS, height // compression, width // compression])},
            {"samples": torch.zeros([batch_size, STAGE_B_CHANNELS, height // 4, width // 4])})


@node("StableCascade_StageC_VAEEncode", display_name=None, category="latent/stable_cascade", python_module=MODULE,
      inputs=[Input("image", "IMAGE"), Input("vae", "VAE"), _compression()],
      outputs=[Output("LATENT", "stage_c"), Output("LATENT", "stage_b")])
def stable_cascade_stage_c_vae_encode(image: Any, vae: Any, compression: int) -> tuple[dict, dict]:
    import torch
    from comfy_core.image.resize import upscale_samples

    image = checks.image_batch(image, "image")
    vae = checks.vae(vae)
    compression = checks.integer(compression, "compression", 4, 128)
    ratio = getattr(vae, "downscale_ratio", None)
    if isinstance(ratio, bool) or not isinstance(ratio, int):
        raise NodeInputError("vae", "a VAE with an integer downscale_ratio (Stable Cascade's stage C VAE)", describe(vae))
    height, width = image.shape[1], image.shape[2]
    out_w, out_h = (width // compression) * ratio, (height // compression) * ratio
    if out_w < 1 or out_h < 1:
        raise NodeInputError("image", f"an image at least {compression} pixels on each side (compression)",
                             f"{width} x {height}")
    pixels = upscale_samples(image.movedim(-1, 1), out_w, out_h, "bicubic", "center").movedim(1, -1)
    stage_c = vae.encode(pixels[..., :3])
    return ({"samples": stage_c},
            {"samples": torch.zeros([stage_c.shape[0], STAGE_B_CHANNELS, (height // 8) * 2, (width // 8) * 2])})


@node("StableCascade_StageB_Conditioning", display_name=None, category="conditioning/stable_cascade",
      python_module=MODULE, inputs=[Input("conditioning", "CONDITIONING"), Input("stage_c", "LATENT")],
      outputs=[Output("CONDITIONING")])
def stable_cascade_stage_b_conditioning(conditioning: list, stage_c: dict) -> tuple[list]:
    from nodes.wan_conditioning import set_values

    conditioning = checks.conditioning(conditioning, "conditioning")
    samples = checks.latent(stage_c, "stage_c", ndims=(4,))
    return (set_values(conditioning, {"stable_cascade_prior": samples}),)


@node("StableCascade_SuperResolutionControlnet", display_name=None, category="_for_testing/stable_cascade",
      python_module=MODULE, experimental=True, inputs=[Input("image", "IMAGE"), Input("vae", "VAE")],
      outputs=[Output("IMAGE", "controlnet_input"), Output("LATENT", "stage_c"), Output("LATENT", "stage_b")])
def stable_cascade_super_resolution_controlnet(image: Any, vae: Any) -> tuple[Any, dict, dict]:
    import torch

    image = checks.image_batch(image, "image")
    vae = checks.vae(vae)
    batch, height, width = image.shape[:3]
    controlnet_input = vae.encode(image[..., :3]).movedim(1, -1)
    return (controlnet_input, {"samples": torch.zeros([batch, STAGE_C_CHANNELS, height // 16, width // 16])},
            {"samples": torch.zeros([batch, STAGE_B_CHANNELS, height // 2, width // 2])})
