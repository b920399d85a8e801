"""Seeded Gaussian noise on IMAGE batches, ComfyUI's ImageAddNoise (comfy_extras/nodes_images.py,
0.3.64), written here from its behaviour."""
from __future__ import annotations

import torch


def add_seeded_noise(images: torch.Tensor, seed: int, strength: float) -> torch.Tensor:
    """`clip(images + strength * N(0, 1), 0, 1)`, the noise drawn on the CPU in float32 from
    `seed` in the images' shape, then moved to their device and dtype, so a seed gives ComfyUI's
    pixels. A generator of its own is used: ComfyUI reseeds torch's global one, which also
    changes every later unseeded draw in the process."""
    generator = torch.Generator(device="cpu").manual_seed(seed)
    noise = torch.randn(images.size(), generator=generator, device="cpu").to(images)
    return torch.clip(images + strength * noise, min=0.0, max=1.0)
