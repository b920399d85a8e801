"""Conditioning for models with extra input channels, with ComfyUI 0.3.64's names, sockets and
semantics: InpaintModelConditioning (`nodes.py`) and InstructPixToPixConditioning
(`comfy_extras/nodes_ip2p.py`).

Both write the image the model is to look at into every conditioning entry (`concat_latent_image`,
a VAE latent; for inpainting also `concat_mask`, the pixel-size mask); the model reads them when
sampling (`DiffusionModel.concat_cond`: 9-channel inpainting UNets get mask + masked-image latent,
8-channel instruct-pix2pix UNets the image latent). The pixel maths is in
comfy_core/image/inpaint.py.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graph.native import Boolean, Input, Output, node
import nodes.checks as checks
from nodes.errors import NodeInputError

if TYPE_CHECKING:
    import torch

# torch is imported inside the functions that run: registering these nodes and rendering
# /object_info must not import it (server start-up).


def _set(conditioning: list, values: dict) -> list:
    from comfy_core.text_encoders.conditioning import set_values

    return set_values(conditioning, values)


@node("InpaintModelConditioning", category="conditioning/inpaint", display_name="InpaintModelConditioning",
      inputs=[Input("positive", "CONDITIONING"), Input("negative", "CONDITIONING"), Input("vae", "VAE"),
              Input("pixels", "IMAGE"), Input("mask", "MASK"),
              Boolean("noise_mask", default=True,
                      tooltip="Add a noise mask to the latent so sampling will only happen within the mask. Might "
                              "improve results or completely break things depending on the model.")],
      outputs=[Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative"), Output("LATENT", "latent")])
def inpaint_model_conditioning(positive: list, negative: list, vae: Any, pixels: torch.Tensor, mask: torch.Tensor,
                               noise_mask: bool = True) -> tuple[list, list, dict]:
    """The latent of the whole image to start from, and conditioning that carries the latent of
    the image with the masked region made grey plus the mask (both cropped to multiples of 8)."""
    from comfy_core.image.inpaint import inpaint_inputs

    positive = checks.conditioning(positive, "positive")
    negative = checks.conditioning(negative, "negative")
    vae = checks.vae(vae)
    pixels = checks.image_batch(pixels, "pixels")
    mask = checks.mask_batch(mask, "mask", ndims=(3, 2, 4))
    if mask.shape[0] not in (1, pixels.shape[0]):
        raise NodeInputError("mask", f"1 or {pixels.shape[0]} masks (one per image)", f"{mask.shape[0]} masks")
    masked, mask = inpaint_inputs(pixels, mask)  # [B, H', W', C], [Bm, 1, H', W']
    concat_latent = vae.encode(masked[..., :3])
    latent = {"samples": vae.encode(pixels[..., :3])}
    if noise_mask:
        latent["noise_mask"] = mask
    values = {"concat_latent_image": concat_latent, "concat_mask": mask}
    return _set(positive, values), _set(negative, values), latent


@node("InstructPixToPixConditioning", category="conditioning/instructpix2pix", display_name=None,
      python_module="comfy_extras.nodes_ip2p",
      inputs=[Input("positive", "CONDITIONING"), Input("negative", "CONDITIONING"), Input("vae", "VAE"),
              Input("pixels", "IMAGE")],
      outputs=[Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative"), Output("LATENT", "latent")])
def instruct_pix_to_pix_conditioning(positive: list, negative: list, vae: Any,
                                     pixels: torch.Tensor) -> tuple[list, list, dict]:
    """An empty latent of the image's size, and conditioning that carries the image's latent
    (the image cropped to multiples of 8, centred)."""
    import torch

    from comfy_core.image.inpaint import crop_to_multiple_of_8

    positive = checks.conditioning(positive, "positive")
    negative = checks.conditioning(negative, "negative")
    vae = checks.vae(vae)
    pixels = checks.image_batch(pixels, "pixels")
    concat_latent = vae.encode(crop_to_multiple_of_8(pixels)[..., :3])
    values = {"concat_latent_image": concat_latent}
    return _set(positive, values), _set(negative, values), {"samples": torch.zeros_like(concat_latent)}
