"""Kandinsky 5 Lite text-to-image: the same network reading the latent alone (16 channels per latent
pixel, no image latent and mask), Flux.1's latents and VAE, shift 3, CLIP type "kandinsky5_image"
(the image template); ComfyUI's `supported_models.Kandinsky5Image`."""
from __future__ import annotations

from comfy_core.families.base import Family
from comfy_core.families.kandinsky5 import kandinsky5_family


def definition() -> Family:
    return kandinsky5_family("kandinsky5_image", "Kandinsky 5 Image", image=True)
