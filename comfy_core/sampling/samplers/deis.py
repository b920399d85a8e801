"""DEIS multistep sampler (`deis`), "tAB" variant.

Zhang & Chen 2023, "Fast Sampling of Diffusion Models with Exponential Integrator" (DEIS,
arXiv 2204.13902): an Adams-Bashforth method whose coefficients integrate Lagrange polynomials
in the VP time t against d(sigma)/dt. The sigmas are mapped to the time of a VP-SDE fitted to EDM's
range (sigma 0.002..80, epsilon 1e-3) and the integrals are Riemann sums over 10 000 points, as in
zju-pi/diff-sampler's `solver_utils.py` (used by ComfyUI's `deis`); d(log alpha)/dt is written
out analytically instead of by autograd.
"""
from __future__ import annotations

import math
from typing import Any

import torch

from comfy_core.sampling.samplers.common import Denoiser, StepCallback, StepDenoiser, derivative_multistep


def edm_to_vp_time(sigmas: torch.Tensor, epsilon_s: float = 1e-3, sigma_min: float = 0.002,
                   sigma_max: float = 80.0) -> tuple[torch.Tensor, float, float]:
    """VP time t of each sigma, and the fitted (beta_0, beta_1) of that VP-SDE."""
    beta_d = 2 * (math.log(sigma_min ** 2 + 1) / epsilon_s - math.log(sigma_max ** 2 + 1)) / (epsilon_s - 1)
    beta_min = math.log(sigma_max ** 2 + 1) - 0.5 * beta_d
    s = sigmas.detach().cpu().float()
    t = ((beta_min ** 2 + 2 * beta_d * (s ** 2 + 1).log()).sqrt() - beta_min) / beta_d
    return t, beta_min, beta_d + beta_min


def _dsigma_dt(beta_0: float, beta_1: float, taus: torch.Tensor) -> torch.Tensor:
    """d(sigma)/dt of the VP-SDE, from alpha(t) = exp(-t^2 (b1 - b0)/2 - t b0)."""
    alpha = torch.exp(-0.5 * taus ** 2 * (beta_1 - beta_0) - taus * beta_0)
    dlog_alpha = -taus * (beta_1 - beta_0) - beta_0
    return -0.5 * dlog_alpha / torch.sqrt(alpha * (1 - alpha))


def deis_coefficients(sigmas: torch.Tensor, max_order: int, n_points: int = 10000) -> list[list[torch.Tensor]]:
    """Per step, the weights of the current and previous derivatives (empty for first-order steps)."""
    t_steps, beta_0, beta_1 = edm_to_vp_time(sigmas)
    out: list[list[torch.Tensor]] = []
    for i in range(len(t_steps) - 1):
        order = min(i + 1, max_order)
        if order == 1:
            out.append([])
            continue
        t_cur, t_next = t_steps[i], t_steps[i + 1]
        taus = torch.linspace(t_cur, t_next, n_points)
        dtau = (t_next - t_cur) / n_points
        prev_t = t_steps[[i - k for k in range(order)]]
        integrand = _dsigma_dt(beta_0, beta_1, taus)
        coeffs = []
        for j in range(order):
            poly = torch.ones_like(taus)
            for k in range(order):
                if k != j:
                    poly = poly * (taus - prev_t[k]) / (prev_t[j] - prev_t[k])
            coeffs.append(torch.sum(integrand * poly) * dtau)
        out.append(coeffs)
    return out


@torch.no_grad()
def sample_deis(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                callback: StepCallback = None, disable: Any = None, max_order: int = 3) -> torch.Tensor:
    """DEIS-tAB of up to `max_order` (see module docstring); Euler on the first and last steps."""
    run = StepDenoiser(model, x, extra_args, callback)
    coeffs = deis_coefficients(sigmas, max_order)

    def advance(x: torch.Tensor, d: torch.Tensor, denoised: torch.Tensor, i: int, order: int,
                history: list[torch.Tensor]) -> torch.Tensor:
        if order == 1 or sigmas[i + 1] <= 0:
            return x + (sigmas[i + 1] - sigmas[i]) * d
        c = [v.to(device=x.device, dtype=x.dtype) for v in coeffs[i]]
        return x + c[0] * d + sum(c[k] * history[-k] for k in range(1, order))

    return derivative_multistep(run, x, sigmas, max_order, advance)
