"""Vocabulary shared by the samplers: the Karras ODE derivative, ancestral step split, churn.

After k-diffusion `sampling.py` (Crowson; MIT) and Karras et al. 2022, "Elucidating the Design
Space of Diffusion-Based Generative Models" (EDM). Pure functions.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

Denoiser = Callable[..., torch.Tensor]
StepCallback = Callable[[dict[str, Any]], None] | None


def append_dims(v: torch.Tensor, ndim: int) -> torch.Tensor:
    """View `v` [B] (or a scalar) with trailing singleton dims up to `ndim`."""
    v = torch.as_tensor(v)
    missing = ndim - v.ndim
    if missing < 0:
        raise ValueError(f"append_dims: input has {v.ndim} dims, more than target {ndim}")
    return v[(...,) + (None,) * missing]


def to_d(x: torch.Tensor, sigma: torch.Tensor, denoised: torch.Tensor) -> torch.Tensor:
    """The probability-flow ODE derivative dx/dsigma = (x - D(x, sigma)) / sigma (EDM eq. 3)."""
    return (x - denoised) / append_dims(sigma, x.ndim)


def get_ancestral_step(sigma_from: torch.Tensor, sigma_to: torch.Tensor,
                       eta: float = 1.0) -> tuple[torch.Tensor, torch.Tensor | float]:
    """Split a step sigma_from -> sigma_to into a deterministic step to `sigma_down` plus fresh
    noise of std `sigma_up`, with sigma_down^2 + sigma_up^2 = sigma_to^2 (DDPM ancestral sampling
    in VE form; `eta` scales the noise, 0 = deterministic)."""
    if not eta:
        return sigma_to, 0.0
    sigma_up = min(sigma_to, eta * (sigma_to ** 2 * (sigma_from ** 2 - sigma_to ** 2) / sigma_from ** 2) ** 0.5)
    sigma_down = (sigma_to ** 2 - sigma_up ** 2) ** 0.5
    return sigma_down, sigma_up


def churn(x: torch.Tensor, sigmas: torch.Tensor, i: int, s_churn: float, s_tmin: float,
          s_tmax: float, s_noise: float) -> tuple[torch.Tensor, torch.Tensor]:
    """EDM Algorithm 2, lines 5-7: raise sigma_i to sigma_hat = sigma_i (1 + gamma) by adding noise.

    With `s_churn == 0` (the default everywhere) nothing is drawn, as in ComfyUI. Noise comes from
    the global RNG, as in k-diffusion.
    """
    if s_churn > 0:
        gamma = min(s_churn / (len(sigmas) - 1), 2 ** 0.5 - 1) if s_tmin <= sigmas[i] <= s_tmax else 0.0
    else:
        gamma = 0.0
    sigma_hat = sigmas[i] * (gamma + 1)
    if gamma > 0:
        eps = torch.randn_like(x) * s_noise
        x = x + eps * (sigma_hat ** 2 - sigmas[i] ** 2) ** 0.5
    return x, sigma_hat


def report(callback: StepCallback, x: torch.Tensor, i: int, sigma: torch.Tensor,
           sigma_hat: torch.Tensor, denoised: torch.Tensor) -> None:
    """Call the per-step callback with k-diffusion's dict (it may raise to stop sampling)."""
    if callback is not None:
        callback({"x": x, "i": i, "sigma": sigma, "sigma_hat": sigma_hat, "denoised": denoised})
