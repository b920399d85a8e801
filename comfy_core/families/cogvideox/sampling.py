"""CogVideoX's model sampling: ComfyUI's V_PREDICTION_DDPM on the zero-terminal-SNR DDPM table.

CogVideoX (and VOID) were trained with diffusers' CogVideoX schedulers, whose network input is the
DDPM sample itself, `x_t = sqrt(a) x0 + sqrt(1 - a) eps` (variance-preserving, std about 1), and
whose output is the velocity v. ComfyUI's V_PREDICTION_DDPM keeps that: the network gets the
sample as it is (no `1 / sqrt(1 + sigma^2)` input scaling) and the clean estimate is
`sqrt(a) x - sqrt(1 - a) v` with `a = 1 / (1 + sigma^2)`; the starting noise is scaled as for any
discrete model (`noise * sqrt(1 + sigma^2)` from pure noise), which VOID's DDIM sampler
(VOIDSampler) skips, working in that variance-preserving space throughout.
"""
from __future__ import annotations

import torch

from comfy_core.models.model_sampling import ModelSampling


def _per_sample(sigma: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    sigma = torch.as_tensor(sigma, dtype=x.dtype, device=x.device)
    return sigma.reshape(sigma.shape[:1] + (1,) * (x.ndim - 1)) if sigma.ndim else sigma


class CogVideoXModelSampling(ModelSampling):
    """ComfyUI's `ModelSamplingDiscrete` with `V_PREDICTION_DDPM` (see the module docstring)."""

    def __init__(self, linear_start: float = 0.00085, linear_end: float = 0.012, timesteps: int = 1000) -> None:
        super().__init__("v", linear_start, linear_end, timesteps, zsnr=True)

    def calculate_input(self, sigma: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return x

    def calculate_denoised(self, sigma: torch.Tensor, model_output: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        s = _per_sample(sigma, model_output)
        alpha = 1.0 / (1.0 + s * s)
        return x * alpha.sqrt() - model_output * (1.0 - alpha).sqrt()
