"""Deterministic (ODE) samplers: euler, heun, heunpp2, dpm_2, lms, dpmpp_2m, ipndm, ipndm_v.

Each follows k-diffusion's calling convention (see the package docstring) and ComfyUI's copy of
k-diffusion (`comfy/k_diffusion/sampling.py`) where the two differ (noted per function).
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from scipy import integrate

from comfy_core.sampling.samplers.common import (Denoiser, StepCallback, StepDenoiser, churn, derivative_multistep,
                                                 half_log_snr, to_d)

ChurnedStep = Callable[[StepDenoiser, torch.Tensor, torch.Tensor, torch.Tensor, int, torch.Tensor], torch.Tensor]


def _churned_ode(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None,
                 callback: StepCallback, churn_options: tuple[float, float, float, float],
                 advance: ChurnedStep) -> torch.Tensor:
    """Karras et al. 2022, Algorithm 2's loop: churn sigma_i up to sigma_hat, evaluate D and the ODE
    derivative d there, report, then `advance(run, x, d, sigmas, i, sigma_hat) -> x` to sigma_{i+1}.

    `churn_options` is (s_churn, s_tmin, s_tmax, s_noise).
    """
    run = StepDenoiser(model, x, extra_args, callback)
    for i in range(len(sigmas) - 1):
        x, sigma_hat = churn(x, sigmas, i, *churn_options)
        d = to_d(x, sigma_hat, run.step(x, sigmas, i, sigma_hat))
        x = advance(run, x, d, sigmas, i, sigma_hat)
    return x


def _euler_step(run: StepDenoiser, x: torch.Tensor, d: torch.Tensor, sigmas: torch.Tensor, i: int,
                sigma_hat: torch.Tensor) -> torch.Tensor:
    return x + d * (sigmas[i + 1] - sigma_hat)


def _heun_step(run: StepDenoiser, x: torch.Tensor, d: torch.Tensor, sigmas: torch.Tensor, i: int,
               sigma_hat: torch.Tensor) -> torch.Tensor:
    dt = sigmas[i + 1] - sigma_hat
    if sigmas[i + 1] == 0:
        return x + d * dt
    x_2 = x + d * dt
    d_2 = to_d(x_2, sigmas[i + 1], run(x_2, sigmas[i + 1]))
    return x + (d + d_2) / 2 * dt


def _heunpp2_step(run: StepDenoiser, x: torch.Tensor, d: torch.Tensor, sigmas: torch.Tensor, i: int,
                  sigma_hat: torch.Tensor) -> torch.Tensor:
    s_end = sigmas[-1]
    dt = sigmas[i + 1] - sigma_hat
    if sigmas[i + 1] == s_end:
        return x + d * dt
    x_2 = x + d * dt
    d_2 = to_d(x_2, sigmas[i + 1], run(x_2, sigmas[i + 1]))
    if sigmas[i + 2] == s_end:
        w2 = sigmas[i + 1] / (2 * sigmas[0])
        return x + (d * (1 - w2) + d_2 * w2) * dt
    x_3 = x_2 + d_2 * (sigmas[i + 2] - sigmas[i + 1])
    d_3 = to_d(x_3, sigmas[i + 2], run(x_3, sigmas[i + 2]))
    w = 3 * sigmas[0]
    w2, w3 = sigmas[i + 1] / w, sigmas[i + 2] / w
    return x + ((1 - w2 - w3) * d + w2 * d_2 + w3 * d_3) * dt


def _dpm_2_step(run: StepDenoiser, x: torch.Tensor, d: torch.Tensor, sigmas: torch.Tensor, i: int,
                sigma_hat: torch.Tensor) -> torch.Tensor:
    if sigmas[i + 1] == 0:
        return x + d * (sigmas[i + 1] - sigma_hat)
    sigma_mid = sigma_hat.log().lerp(sigmas[i + 1].log(), 0.5).exp()
    x_2 = x + d * (sigma_mid - sigma_hat)
    d_2 = to_d(x_2, sigma_mid, run(x_2, sigma_mid))
    return x + d_2 * (sigmas[i + 1] - sigma_hat)


@torch.no_grad()
def sample_euler(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                 callback: StepCallback = None, disable: Any = None, s_churn: float = 0.0,
                 s_tmin: float = 0.0, s_tmax: float = float("inf"), s_noise: float = 1.0) -> torch.Tensor:
    """Euler steps on the probability-flow ODE: Karras et al. 2022, Algorithm 2 (Euler variant)."""
    return _churned_ode(model, x, sigmas, extra_args, callback, (s_churn, s_tmin, s_tmax, s_noise), _euler_step)


@torch.no_grad()
def sample_heun(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                callback: StepCallback = None, disable: Any = None, s_churn: float = 0.0,
                s_tmin: float = 0.0, s_tmax: float = float("inf"), s_noise: float = 1.0) -> torch.Tensor:
    """Heun's second-order method: Karras et al. 2022, Algorithm 2. Euler on the step to sigma 0."""
    return _churned_ode(model, x, sigmas, extra_args, callback, (s_churn, s_tmin, s_tmax, s_noise), _heun_step)


@torch.no_grad()
def sample_heunpp2(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                   callback: StepCallback = None, disable: Any = None, s_churn: float = 0.0,
                   s_tmin: float = 0.0, s_tmax: float = float("inf"), s_noise: float = 1.0) -> torch.Tensor:
    """Heun++ (third-order look-ahead blend), from Carzit's sd-webui-samplers-scheduler (MIT), as
    shipped by ComfyUI: derivatives at sigma_i, sigma_{i+1}, sigma_{i+2} weighted by
    sigma_{i+1}/(3 sigma_0) and sigma_{i+2}/(3 sigma_0); Heun-like near the end, Euler last.

    ComfyUI also draws an unused `randn_like` every step (advancing the global RNG); we do not.
    """
    return _churned_ode(model, x, sigmas, extra_args, callback, (s_churn, s_tmin, s_tmax, s_noise), _heunpp2_step)


@torch.no_grad()
def sample_dpm_2(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                 callback: StepCallback = None, disable: Any = None, s_churn: float = 0.0,
                 s_tmin: float = 0.0, s_tmax: float = float("inf"), s_noise: float = 1.0) -> torch.Tensor:
    """Second-order midpoint steps at the geometric-mean sigma, inspired by DPM-Solver-2
    (Lu et al. 2022, arXiv 2206.00927) and Karras et al. 2022 Algorithm 2 (k-diffusion)."""
    return _churned_ode(model, x, sigmas, extra_args, callback, (s_churn, s_tmin, s_tmax, s_noise), _dpm_2_step)


def linear_multistep_coeff(order: int, t: Any, i: int, j: int) -> float:
    """Integral over [t_i, t_{i+1}] of the Lagrange basis polynomial j through t_i..t_{i-order+1}."""
    if order - 1 > i:
        raise ValueError(f"linear_multistep_coeff: order {order} too high for step {i}")

    def basis(tau: float) -> float:
        prod = 1.0
        for k in range(order):
            if j != k:
                prod *= (tau - t[i - k]) / (t[i - j] - t[i - k])
        return prod

    return integrate.quad(basis, t[i], t[i + 1], epsrel=1e-4)[0]


@torch.no_grad()
def sample_lms(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
               callback: StepCallback = None, disable: Any = None, order: int = 4) -> torch.Tensor:
    """Linear multistep (Adams-Bashforth in sigma) of up to `order`, coefficients by quadrature
    (k-diffusion). As ComfyUI, the step to sigma 0 returns the denoised sample."""
    run = StepDenoiser(model, x, extra_args, callback)
    sigmas_cpu = sigmas.detach().cpu().numpy()
    ds: list[torch.Tensor] = []
    for i in range(len(sigmas) - 1):
        denoised = run.step(x, sigmas, i)
        ds.append(to_d(x, sigmas[i], denoised))
        if len(ds) > order:
            ds.pop(0)
        if sigmas[i + 1] == 0:
            x = denoised
        else:
            cur_order = min(i + 1, order)
            coeffs = [linear_multistep_coeff(cur_order, sigmas_cpu, i, j) for j in range(cur_order)]
            x = x + sum(c * d for c, d in zip(coeffs, reversed(ds)))
    return x


@torch.no_grad()
def sample_dpmpp_2m(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                    callback: StepCallback = None, disable: Any = None) -> torch.Tensor:
    """DPM-Solver++(2M): Lu et al. 2022, "DPM-Solver++" (arXiv 2211.01095), Algorithm 2, in t = -log sigma."""
    run = StepDenoiser(model, x, extra_args, callback)
    old_denoised = None
    for i in range(len(sigmas) - 1):
        denoised = run.step(x, sigmas, i)
        t, t_next = half_log_snr(sigmas[i]), half_log_snr(sigmas[i + 1])
        h = t_next - t
        ratio = t_next.neg().exp() / t.neg().exp()  # sigma_{i+1}/sigma_i, rounded as ComfyUI
        if old_denoised is None or sigmas[i + 1] == 0:
            x = ratio * x - (-h).expm1() * denoised
        else:
            r = (t + sigmas[i - 1].log()) / h  # h_last / h
            denoised_d = (1 + 1 / (2 * r)) * denoised - (1 / (2 * r)) * old_denoised
            x = ratio * x - (-h).expm1() * denoised_d
        old_denoised = denoised
    return x


def _ipndm_step(sigmas: torch.Tensor, variable: bool) -> Callable[..., torch.Tensor]:
    """iPNDM's step rule for `derivative_multistep`: the denoised sample on the step to sigma 0,
    else Adams-Bashforth of the available order, with fixed or variable-step coefficients."""

    def advance(x: torch.Tensor, d: torch.Tensor, denoised: torch.Tensor, i: int, order: int,
                history: list[torch.Tensor]) -> torch.Tensor:
        dt = sigmas[i + 1] - sigmas[i]
        if sigmas[i + 1] == 0:
            return denoised
        if order == 1:
            return x + dt * d
        if variable:
            return x + dt * _ipndm_v_combination(sigmas, i, order, d, history)
        # Adams-Bashforth coefficients for equal steps.
        if order == 2:
            return x + dt * (3 * d - history[-1]) / 2
        if order == 3:
            return x + dt * (23 * d - 16 * history[-1] + 5 * history[-2]) / 12
        return x + dt * (55 * d - 59 * history[-1] + 37 * history[-2] - 9 * history[-3]) / 24

    return advance


def _ipndm_v_combination(sigmas: torch.Tensor, i: int, order: int, d: torch.Tensor,
                         history: list[torch.Tensor]) -> torch.Tensor:
    """Variable-step Adams-Bashforth weights (Zhang & Chen 2023, DEIS; zju-pi diff-solvers)."""
    h_n = sigmas[i + 1] - sigmas[i]
    h_n_1 = sigmas[i] - sigmas[i - 1]
    c1 = (2 + h_n / h_n_1) / 2
    c2 = -(h_n / h_n_1) / 2
    if order == 2:
        return c1 * d + c2 * history[-1]
    h_n_2 = sigmas[i - 1] - sigmas[i - 2]
    temp1 = (1 - h_n / (3 * (h_n + h_n_1)) * (h_n * (h_n + h_n_1)) / (h_n_1 * (h_n_1 + h_n_2))) / 2
    if order == 3:
        return ((c1 + temp1) * d + (c2 - (1 + h_n_1 / h_n_2) * temp1) * history[-1]
                + temp1 * h_n_1 / h_n_2 * history[-2])
    h_n_3 = sigmas[i - 2] - sigmas[i - 3]
    temp2 = (((1 - h_n / (3 * (h_n + h_n_1))) / 2 + (1 - h_n / (2 * (h_n + h_n_1))) * h_n / (6 * (h_n + h_n_1 + h_n_2)))
             * (h_n * (h_n + h_n_1) * (h_n + h_n_1 + h_n_2)) / (h_n_1 * (h_n_1 + h_n_2) * (h_n_1 + h_n_2 + h_n_3)))
    ratio = h_n_1 * (h_n_1 + h_n_2) / (h_n_2 * (h_n_2 + h_n_3))
    k1 = c1 + temp1 + temp2
    k2 = c2 - (1 + h_n_1 / h_n_2) * temp1 - (1 + h_n_1 / h_n_2 + ratio) * temp2
    k3 = temp1 * h_n_1 / h_n_2 + (h_n_1 / h_n_2 + ratio * (1 + h_n_2 / h_n_3)) * temp2
    k4 = -temp2 * ratio * h_n_1 / h_n_2
    return k1 * d + k2 * history[-1] + k3 * history[-2] + k4 * history[-3]


@torch.no_grad()
def sample_ipndm(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                 callback: StepCallback = None, disable: Any = None, max_order: int = 4) -> torch.Tensor:
    """Improved PNDM (Zhang & Chen 2023, "Fast Sampling of Diffusion Models with Exponential
    Integrator", iPNDM): fixed-coefficient Adams-Bashforth up to 4th order; the last step denoises."""
    run = StepDenoiser(model, x, extra_args, callback)
    return derivative_multistep(run, x, sigmas, max_order, _ipndm_step(sigmas, variable=False))


@torch.no_grad()
def sample_ipndm_v(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                   callback: StepCallback = None, disable: Any = None, max_order: int = 4) -> torch.Tensor:
    """iPNDM with variable-step Adams-Bashforth coefficients (Zhang & Chen 2023)."""
    run = StepDenoiser(model, x, extra_args, callback)
    return derivative_multistep(run, x, sigmas, max_order, _ipndm_step(sigmas, variable=True))
