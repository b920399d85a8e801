"""NOISE wire objects: what SamplerCustomAdvanced draws its starting noise from.

ComfyUI's `Noise_RandomNoise` / `Noise_EmptyNoise` (comfy_extras/nodes_custom_sampler.py): an
object with a `seed` (also handed to the sampler for its per-step noise) and
`generate_noise(latent) -> tensor` taking the whole LATENT dict (so `batch_index` is honoured).
"""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.latent.nested import NestedTensor, is_nested
from comfy_core.sampling.noise import prepare_noise


class RandomNoise:
    """Seeded CPU Gaussian noise in the latent's shape, exactly as KSampler draws it."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def generate_noise(self, input_latent: dict[str, Any]) -> Any:
        samples = input_latent["samples"]
        return prepare_noise(samples, self.seed, input_latent.get("batch_index"))


class EmptyNoise:
    """No noise: zeros like the latent (on the CPU, as ComfyUI); its seed is 0."""

    def __init__(self) -> None:
        self.seed = 0

    def generate_noise(self, input_latent: dict[str, Any]) -> Any:
        samples = input_latent["samples"]
        if is_nested(samples):  # zeros per part of a nested latent
            return NestedTensor([torch.zeros(t.shape, dtype=t.dtype, layout=t.layout, device="cpu")
                                 for t in samples.unbind()])
        return torch.zeros(samples.shape, dtype=samples.dtype, layout=samples.layout, device="cpu")
