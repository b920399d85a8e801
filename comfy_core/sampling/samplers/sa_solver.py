"""SA-Solver, the stochastic Adams predictor-corrector (`sa_solver`, `sa_solver_pece`).

Xue et al. 2023, "SA-Solver: Stochastic Adams Solver for Fast Sampling of Diffusion Models"
(NeurIPS 2023, arXiv 2309.05019): multistep predictor (eq. 15) and corrector (eq. 18) in data
prediction over the half-log-SNR lambda, with stochasticity tau inside a sigma interval (by default
the middle 20%-80% of the process, eta 1). Follows ComfyUI's `comfy/k_diffusion/sa_solver.py` and
`sample_sa_solver` for eps/v models (alpha = 1); noise from the seeded default noise sampler.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import torch

from comfy_core.models.model_sampling import ModelSampling
from comfy_core.sampling.noise import NoiseSampler
from comfy_core.sampling.samplers.common import (Denoiser, StepCallback, StepDenoiser, half_log_snr,
                                                 seeded_noise_sampler)


def exponential_coeffs(s: torch.Tensor, t: torch.Tensor, order: int, tau: float) -> torch.Tensor:
    """(1 + tau^2) * integral_s^t exp((1 + tau^2) x) x^p dx for p < order, with exp((1 + tau^2) t)
    factored out, by the integration-by-parts recursion (shape [order])."""
    tau_mul = 1 + tau ** 2
    h = t - s
    p = torch.arange(order, dtype=s.dtype, device=s.device)
    product_terms = t ** p - s ** p * (-tau_mul * h).exp()
    depth = p.unsqueeze(1) - p.unsqueeze(0)
    log_fact = (p + 1).lgamma()
    coeff = log_fact.unsqueeze(1) - log_fact.unsqueeze(0)
    if tau > 0:
        coeff = coeff - depth * math.log(tau_mul)
    signs = torch.where(depth % 2 == 0, 1.0, -1.0)
    return (coeff.exp() * signs).tril() @ product_terms


def _simple_order_2(sigma_next: torch.Tensor, lambdas: torch.Tensor, lambda_s: torch.Tensor,
                    lambda_t: torch.Tensor, tau: float, corrector: bool) -> torch.Tensor:
    """The paper's simplified order-2 coefficients (Appendix D)."""
    tau_mul = 1 + tau ** 2
    h = lambda_t - lambda_s
    alpha_t = sigma_next * lambda_t.exp()
    if corrector:
        b_1 = alpha_t * (0.5 * tau_mul * h)
        b_2 = alpha_t * (-h * tau_mul).expm1().neg() - b_1
    else:
        b_2 = alpha_t * (0.5 * tau_mul * h ** 2) / (lambdas[-2] - lambda_s)
        b_1 = alpha_t * (-h * tau_mul).expm1().neg() - b_2
    return torch.stack([b_2, b_1])


def adams_b_coeffs(sigma_next: torch.Tensor, lambdas: torch.Tensor, lambda_s: torch.Tensor,
                   lambda_t: torch.Tensor, tau: float, simple_order_2: bool = False,
                   corrector: bool = False) -> torch.Tensor:
    """Weights b_i of the stored x0 predictions at `lambdas` for a step lambda_s -> lambda_t (eqs. 15, 18)."""
    n = lambdas.shape[0]
    if simple_order_2 and n == 2:
        return _simple_order_2(sigma_next, lambdas, lambda_s, lambda_t, tau, corrector)
    integrals = exponential_coeffs(lambda_s, lambda_t, n, tau)
    vander_t = torch.vander(lambdas, n, increasing=True).T
    lagrange = torch.linalg.solve(vander_t, integrals)
    return sigma_next * lambda_t.exp() * lagrange  # alpha_t * ...


def tau_interval(start_sigma: float, end_sigma: float, eta: float = 1.0) -> Callable[[Any], float]:
    """tau = eta inside [end_sigma, start_sigma], else 0 (an ODE step)."""

    def tau(sigma: Any) -> float:
        if eta <= 0:
            return 0.0
        s = float(sigma)
        return eta if start_sigma >= s >= end_sigma else 0.0

    return tau


@torch.no_grad()
def sample_sa_solver(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                     callback: StepCallback = None, disable: Any = None, tau_func: Callable[[Any], float] | None = None,
                     s_noise: float = 1.0, noise_sampler: NoiseSampler | None = None, predictor_order: int = 3,
                     corrector_order: int = 4, use_pece: bool = False, simple_order_2: bool = False) -> torch.Tensor:
    """SA-Solver predictor-corrector (PEC, or PECE with `use_pece`)."""
    if len(sigmas) <= 1:
        return x
    run = StepDenoiser(model, x, extra_args, callback)
    noise_sampler = seeded_noise_sampler(x, run.extra_args, noise_sampler)
    if tau_func is None:
        ms = getattr(model, "model_sampling", None) or ModelSampling()
        tau_func = tau_interval(ms.percent_to_sigma(0.2), ms.percent_to_sigma(0.8), eta=1.0)
    lambdas = half_log_snr(sigmas)
    max_order = max(predictor_order, corrector_order)
    x_pred = x
    h: Any = 0.0
    tau_t = 0.0
    noise: Any = 0.0
    preds: list[torch.Tensor] = []
    lower_order_to_end = float(sigmas[-1]) == 0
    for i in range(len(sigmas) - 1):
        denoised = run.step(x_pred, sigmas, i)
        preds = (preds + [denoised])[-max_order:]
        p_order = min(predictor_order, len(preds))
        c_order = 0 if i == 0 or (sigmas[i + 1] == 0 and not use_pece) else min(corrector_order, len(preds))
        if lower_order_to_end:
            p_order = min(p_order, len(sigmas) - 2 - i)
            c_order = min(c_order, len(sigmas) - 1 - i)
        # Corrector
        if c_order == 0:
            x = x_pred
        else:
            b = adams_b_coeffs(sigmas[i], lambdas[i - c_order + 1:i + 1], lambdas[i - 1], lambdas[i], tau_t,
                               simple_order_2, corrector=True)
            res = torch.tensordot(torch.stack(preds[-c_order:], dim=1), b.to(x.dtype), dims=([1], [0]))
            x = sigmas[i] / sigmas[i - 1] * (-(tau_t ** 2) * h).exp() * x + res
            if tau_t > 0 and s_noise > 0:
                x = x + noise  # the predictor's noise, reused
            if use_pece:
                denoised = run(x, sigmas[i])
                preds[-1] = denoised
        # Predictor
        if sigmas[i + 1] == 0:
            x_pred = denoised
        else:
            tau_t = tau_func(sigmas[i + 1])
            b = adams_b_coeffs(sigmas[i + 1], lambdas[i - p_order + 1:i + 1], lambdas[i], lambdas[i + 1], tau_t,
                               simple_order_2, corrector=False)
            res = torch.tensordot(torch.stack(preds[-p_order:], dim=1), b.to(x.dtype), dims=([1], [0]))
            h = lambdas[i + 1] - lambdas[i]
            x_pred = sigmas[i + 1] / sigmas[i] * (-(tau_t ** 2) * h).exp() * x + res
            if tau_t > 0 and s_noise > 0:
                noise = (noise_sampler(sigmas[i], sigmas[i + 1]) * sigmas[i + 1]
                         * (-2 * tau_t ** 2 * h).expm1().neg().sqrt() * s_noise)
                x_pred = x_pred + noise
    return x_pred


@torch.no_grad()
def sample_sa_solver_pece(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                          callback: StepCallback = None, disable: Any = None,
                          tau_func: Callable[[Any], float] | None = None, s_noise: float = 1.0,
                          noise_sampler: NoiseSampler | None = None, predictor_order: int = 3,
                          corrector_order: int = 4, simple_order_2: bool = False) -> torch.Tensor:
    """SA-Solver in PECE mode (predict, evaluate, correct, evaluate)."""
    return sample_sa_solver(model, x, sigmas, extra_args, callback, disable, tau_func, s_noise, noise_sampler,
                            predictor_order, corrector_order, use_pece=True, simple_order_2=simple_order_2)
