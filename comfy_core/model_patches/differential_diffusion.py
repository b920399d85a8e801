"""Differential Diffusion (Levin & Fried 2023, "Differential Diffusion: Giving Each Pixel Its
Strength", arXiv 2306.00950) as a `denoise_mask_function`.

Behaviour of ComfyUI's comfy_extras/nodes_differential_diffusion.py: at each step the soft
inpainting mask becomes the binary mask `mask >= threshold`, the threshold falling linearly in
timestep from 1 at the schedule's first sigma to 0 at its last (or the model's sigma_min if that
is larger), so a pixel joins the denoised region once the run is far enough along its mask value;
`strength < 1` blends that binary mask with the soft one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


def mask_threshold(sigma: torch.Tensor, sigmas: torch.Tensor, model_sampling: Any) -> torch.Tensor:
    """`(t(sigma) - t(sigma_to)) / (t(sigma_from) - t(sigma_to))`, sigma_from = sigmas[0],
    sigma_to = max(sigmas[-1], sigma_min), t the model's timestep."""
    sigma_to = model_sampling.sigma_min
    if sigmas[-1] > sigma_to:
        sigma_to = sigmas[-1]
    ts_from = model_sampling.timestep(sigmas[0])
    ts_to = model_sampling.timestep(sigma_to)
    current = model_sampling.timestep(sigma[0])
    return (current - ts_to) / (ts_from - ts_to)


@dataclass(frozen=True)
class DifferentialDiffusion:
    """`denoise_mask_function(sigma, denoise_mask, extra_options) -> mask`; `extra_options`
    holds `model` (the guider, whose `inner_model` is the diffusion model) and `sigmas`."""

    strength: float = 1.0

    def __call__(self, sigma: torch.Tensor, denoise_mask: torch.Tensor, extra_options: dict) -> torch.Tensor:
        model_sampling = extra_options["model"].inner_model.model_sampling
        threshold = mask_threshold(sigma, extra_options["sigmas"], model_sampling)
        binary = (denoise_mask >= threshold).to(denoise_mask.dtype)
        if self.strength and self.strength < 1:
            return self.strength * binary + (1 - self.strength) * denoise_mask
        return binary

    def cache_signature(self) -> tuple:
        return ("DifferentialDiffusion", self.strength)
