"""The first-order stochastic exponential-integrator step in data prediction, shared by the
multistep SDE samplers (dpmpp_2m_sde, dpmpp_3m_sde) and the SEEDS samplers (seeds_2, seeds_3).

For eps/v models (alpha = 1) in the half-log-SNR lambda = -log(sigma), a step sigma -> sigma_next
with h = lambda_next - lambda and noise share eta is

    x_next = (sigma_next / sigma) e^{-h eta} x + alpha_next (1 - e^{-h (1 + eta)}) D
             + sigma_next sqrt(1 - e^{-2 h eta}) z,

the DPM-Solver++ SDE step (Lu et al. 2022, "DPM-Solver++", arXiv 2211.01095) and the SEEDS-1 step
(Gonzalez et al. 2023, arXiv 2305.14267); eta = 0 gives the ODE step. The terms are written with
ComfyUI's rounding (`comfy/k_diffusion/sampling.py`): alpha_next is sigma_next * e^{lambda_next}, 1 up
to rounding, so the samplers reproduce ComfyUI bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from comfy_core.sampling.samplers.common import half_log_snr


@dataclass(frozen=True)
class ExponentialStep:
    """The scalars of one step sigma -> sigma_next (0-dim tensors, or floats for eta)."""

    sigma: torch.Tensor
    sigma_next: torch.Tensor
    eta: float
    lam: torch.Tensor  # half-log-SNR of sigma
    lam_next: torch.Tensor
    h: torch.Tensor  # lambda_next - lambda
    h_eta: torch.Tensor  # h (1 + eta)
    alpha_next: torch.Tensor  # sigma_next e^{lambda_next}

    @classmethod
    def between(cls, sigma: torch.Tensor, sigma_next: torch.Tensor, eta: float) -> "ExponentialStep":
        lambda_s, lambda_t = half_log_snr(sigma), half_log_snr(sigma_next)
        h = lambda_t - lambda_s
        return cls(sigma, sigma_next, eta, lambda_s, lambda_t, h, h * (eta + 1), sigma_next * lambda_t.exp())


def sde_decay(step: ExponentialStep, x: torch.Tensor) -> torch.Tensor:
    """(sigma_next / sigma) e^{-h eta} x: what is left of x after the step."""
    return step.sigma_next / step.sigma * (-step.h * step.eta).exp() * x


def sde_first_order(step: ExponentialStep, x: torch.Tensor, denoised: torch.Tensor) -> torch.Tensor:
    """The noiseless part of the step: `sde_decay` + alpha_next (1 - e^{-h (1 + eta)}) D."""
    return sde_decay(step, x) + step.alpha_next * (-step.h_eta).expm1().neg() * denoised


def sde_noise(step: ExponentialStep, noise: torch.Tensor, s_noise: float) -> torch.Tensor:
    """The noise term sigma_next sqrt(1 - e^{-2 h eta}) z, scaled by `s_noise`."""
    return noise * step.sigma_next * (-2 * step.h * step.eta).expm1().neg().sqrt() * s_noise
