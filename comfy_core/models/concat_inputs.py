"""The extra UNet input channels of inpainting and instruct-pix2pix models (`c_concat`).

After ComfyUI's `comfy/model_base.py`: `BaseModel.concat_cond` with the inpainting keys
`("mask", "masked_image")` that `set_inpaint` sets, and `IP2P.concat_cond`. The sampler
concatenates the result to the (scaled) noisy latent along the channels, so a 9-channel
inpainting UNet sees `[noisy latent (4), mask (1), masked-image latent (4)]` and an 8-channel
instruct-pix2pix UNet `[noisy latent (4), image latent (4)]`. Written here from that behaviour:

Inpainting (`inpaint_concat`):
- the mask is the conditioning's `concat_mask` (InpaintModelConditioning's pixel-size mask) or
  else the sampler's denoise mask; its first channel, resized bilinearly (centre crop to the
  latent's aspect) to the latent size, rounded to 0/1, resized to the batch;
- the image is the conditioning's `concat_latent_image` (a VAE latent, brought into model space
  with the family's latent format) or else the latent being sampled, resized likewise;
- without any mask the model gets an all-ones mask and a "blank" latent (what a black image
  encodes to, in SD latent units), whatever image was given, as ComfyUI does.

Instruct-pix2pix (`ip2p_concat`): `concat_latent_image` as it is (not scaled: diffusers'
instruct-pix2pix models were trained on unscaled latents) or zeros, resized to the latent and
the batch.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import torch

from comfy_core.image.resize import upscale_samples

# ComfyUI's `blank_inpaint_image_like`: the latent of a black image, per SD latent channel.
BLANK_INPAINT_LATENT = (0.8223, -0.6876, 0.6364, 0.1380)


def resize_to_batch_size(tensor: torch.Tensor, batch_size: int) -> torch.Tensor:
    """Pick rows so that `tensor` has `batch_size` of them, spread evenly (ComfyUI's
    `comfy.utils.resize_to_batch_size`: nearest rows, not tiling)."""
    in_size = tensor.shape[0]
    if in_size == batch_size:
        return tensor
    if batch_size <= 1:
        return tensor[:batch_size]
    if batch_size < in_size:
        scale = (in_size - 1) / (batch_size - 1)
        index = [min(round(i * scale), in_size - 1) for i in range(batch_size)]
    else:
        scale = in_size / batch_size
        index = [min(math.floor((i + 0.5) * scale), in_size - 1) for i in range(batch_size)]
    return tensor[index]


def _fit(samples: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """Resize `[B, C, h, w]` to the noise's spatial size (bilinear, centre crop) when it differs."""
    if samples.shape[1:] != noise.shape[1:]:
        samples = upscale_samples(samples, noise.shape[-1], noise.shape[-2], "bilinear", "center")
    return samples


def blank_inpaint_latent(noise: torch.Tensor) -> torch.Tensor:
    """`[B, 4, h, w]` filled with the latent of a black image."""
    blank = torch.ones_like(noise)
    for channel, value in enumerate(BLANK_INPAINT_LATENT):
        blank[:, channel] *= value
    return blank


def inpaint_mask(mask: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """A mask `[B?, (C,) H, W]` -> `[B, 1, h, w]` 0/1 at the latent's size and batch."""
    if mask.ndim == noise.ndim:
        mask = mask[:, :1]
    mask = mask.reshape((-1, 1) + tuple(mask.shape[-2:]))
    if mask.shape[-2:] != noise.shape[-2:]:
        mask = upscale_samples(mask, noise.shape[-1], noise.shape[-2], "bilinear", "center")
    return resize_to_batch_size(mask.round(), noise.shape[0])


def inpaint_concat(noise: torch.Tensor, device: torch.device | str, *, latent_image: torch.Tensor | None,
                   denoise_mask: torch.Tensor | None = None, concat_latent_image: torch.Tensor | None = None,
                   concat_mask: torch.Tensor | None = None,
                   process_latent_in: Callable[[torch.Tensor], torch.Tensor] = lambda x: x) -> torch.Tensor:
    """`[B, 1 + C, h, w]`: mask then masked-image latent (see the module docstring).

    noise [B, C, h, w]; latent_image [B, C, h, w] in model space; denoise_mask [B, C, h, w] (the
    sampler's prepared mask); concat_latent_image a VAE latent [b, C, h', w']; concat_mask
    [b, 1, H, W] or [b, H, W]."""
    mask = concat_mask if concat_mask is not None else denoise_mask
    image = latent_image if concat_latent_image is None else process_latent_in(concat_latent_image)
    if image is None:
        raise ValueError("inpaint_concat: no image to inpaint (neither concat_latent_image nor latent_image)")
    image = resize_to_batch_size(_fit(image, noise), noise.shape[0])
    if mask is None:
        return torch.cat([torch.ones_like(noise)[:, :1], blank_inpaint_latent(noise)], dim=1)
    mask = inpaint_mask(mask, noise)
    return torch.cat([mask.to(device), image.to(device)], dim=1)


def ip2p_concat(noise: torch.Tensor, device: torch.device | str,
                concat_latent_image: torch.Tensor | None = None) -> torch.Tensor:
    """`[B, C, h, w]`: the image latent to edit (zeros without one), fitted to the noise."""
    image = torch.zeros_like(noise) if concat_latent_image is None else concat_latent_image.to(device=device)
    return resize_to_batch_size(_fit(image, noise), noise.shape[0])


def flux_concat(noise: torch.Tensor, device: torch.device | str, in_channels: int, out_channels: int, *,
                concat_latent_image: torch.Tensor | None, concat_mask: torch.Tensor | None,
                denoise_mask: torch.Tensor | None, process_latent_in: Any) -> torch.Tensor | None:
    """Flux's extra input channels, as ComfyUI's `model_base.Flux.concat_cond`: none for the plain
    model (16 channels in); the image latent (Canny / Depth dev, 32 in: InstructPixToPixConditioning's
    `concat_latent_image`, zeros without one); or that plus the mask packed 8x8 into 64 channels
    (Fill, 96 in: InpaintModelConditioning's `concat_mask`, else the denoise mask, else ones).

    `in_channels` counts the unpatchified channels (the `img_in` width over the patch area)."""
    if in_channels <= out_channels:
        return None
    image = concat_latent_image if concat_latent_image is not None else torch.zeros_like(noise)
    image = upscale_samples(image.to(device), noise.shape[-1], noise.shape[-2], "bilinear", "center")
    image = process_latent_in(resize_to_batch_size(image, noise.shape[0]))  # [B, 16, h, w]
    if in_channels <= out_channels * 2:
        return image
    mask = concat_mask if concat_mask is not None else denoise_mask
    if mask is None:
        mask = torch.ones_like(noise)[:, :1]
    mask = torch.mean(mask.to(device), dim=1, keepdim=True)  # [B, 1, H, W]
    mask = upscale_samples(mask, noise.shape[-1] * 8, noise.shape[-2] * 8, "bilinear", "center")
    b, h, w = mask.shape[0], noise.shape[-2], noise.shape[-1]
    # Each latent pixel's 8x8 mask values become 64 channels, row-major within the patch.
    mask = mask.view(b, h, 8, w, 8).permute(0, 2, 4, 1, 3).reshape(b, 64, h, w)
    return torch.cat((image, resize_to_batch_size(mask, noise.shape[0])), dim=1)  # [B, 80, h, w]
