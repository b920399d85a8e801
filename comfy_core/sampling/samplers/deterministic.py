"""Deterministic (ODE) samplers: euler, heun, heunpp2, dpm_2, lms, dpmpp_2m, ipndm, ipndm_v.

Each follows k-diffusion's calling convention (see the package docstring) and ComfyUI's copy of
k-diffusion (`comfy/k_diffusion/sampling.py`) where the two differ (noted per function). The plain
ones are one self-contained loop each, as in k-diffusion: per step, (EDM churn,) one call
`model(x, sigma * s_in, **extra_args)` for the x0 prediction, the callback, and the update.
"""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.sampling.samplers.common import Denoiser, StepCallback, churn, half_log_snr, to_d


@torch.no_grad()
def sample_euler(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                 callback: StepCallback = None, disable: Any = None, s_churn: float = 0.0,
                 s_tmin: float = 0.0, s_tmax: float = float("inf"), s_noise: float = 1.0) -> torch.Tensor:
    """Euler steps on the probability-flow ODE: Karras et al. 2022, Algorithm 2 (Euler variant)."""
    extra_args = {} if extra_args is None else extra_args
    s_in = x.new_ones([x.shape[0]])
    for i in range(len(sigmas) - 1):
        x, sigma_hat = churn(x, sigmas, i, s_churn, s_tmin, s_tmax, s_noise)
        denoised = model(x, sigma_hat * s_in, **extra_args)
        if callback is not None:
            callback({"x": x, "i": i, "sigma": sigmas[i], "sigma_hat": sigma_hat, "denoised": denoised})
        d = to_d(x, sigma_hat, denoised)
        x = x + d * (sigmas[i + 1] - sigma_hat)
    return x


@torch.no_grad()
def sample_heun(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                callback: StepCallback = None, disable: Any = None, s_churn: float = 0.0,
                s_tmin: float = 0.0, s_tmax: float = float("inf"), s_noise: float = 1.0) -> torch.Tensor:
    """Heun's second-order method: Karras et al. 2022, Algorithm 2. Euler on the step to sigma 0."""
    extra_args = {} if extra_args is None else extra_args
    s_in = x.new_ones([x.shape[0]])
    for i in range(len(sigmas) - 1):
        x, sigma_hat = churn(x, sigmas, i, s_churn, s_tmin, s_tmax, s_noise)
        denoised = model(x, sigma_hat * s_in, **extra_args)
        if callback is not None:
            callback({"x": x, "i": i, "sigma": sigmas[i], "sigma_hat": sigma_hat, "denoised": denoised})
        d = to_d(x, sigma_hat, denoised)
        dt = sigmas[i + 1] - sigma_hat
        if sigmas[i + 1] == 0:
            x = x + d * dt  # Euler method
        else:
            x_2 = x + d * dt
            d_2 = to_d(x_2, sigmas[i + 1], model(x_2, sigmas[i + 1] * s_in, **extra_args))
            x = x + (d + d_2) / 2 * dt  # Heun's method: the mean of the two slopes
    return x


@torch.no_grad()
def sample_heunpp2(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                   callback: StepCallback = None, disable: Any = None, s_churn: float = 0.0,
                   s_tmin: float = 0.0, s_tmax: float = float("inf"), s_noise: float = 1.0) -> torch.Tensor:
    """Heun++ (third-order look-ahead blend), from Carzit's sd-webui-samplers-scheduler (MIT), as
    shipped by ComfyUI: derivatives at sigma_i, sigma_{i+1}, sigma_{i+2} weighted by
    sigma_{i+1}/(3 sigma_0) and sigma_{i+2}/(3 sigma_0); Heun-like near the end, Euler last.

    ComfyUI also draws an unused `randn_like` every step (advancing the global RNG); we do not.
    """
    extra_args = {} if extra_args is None else extra_args
    s_in = x.new_ones([x.shape[0]])
    s_end = sigmas[-1]
    for i in range(len(sigmas) - 1):
        x, sigma_hat = churn(x, sigmas, i, s_churn, s_tmin, s_tmax, s_noise)
        denoised = model(x, sigma_hat * s_in, **extra_args)
        if callback is not None:
            callback({"x": x, "i": i, "sigma": sigmas[i], "sigma_hat": sigma_hat, "denoised": denoised})
        d = to_d(x, sigma_hat, denoised)
        dt = sigmas[i + 1] - sigma_hat
        if sigmas[i + 1] == s_end:
            x = x + d * dt  # Euler on the last step
        elif sigmas[i + 2] == s_end:  # Heun-like, weighted towards the first slope
            x_2 = x + d * dt
            d_2 = to_d(x_2, sigmas[i + 1], model(x_2, sigmas[i + 1] * s_in, **extra_args))
            w2 = sigmas[i + 1] / (2 * sigmas[0])
            x = x + (d * (1 - w2) + d_2 * w2) * dt
        else:  # slopes at sigma_{i+1} and sigma_{i+2}, blended with the first
            x_2 = x + d * dt
            d_2 = to_d(x_2, sigmas[i + 1], model(x_2, sigmas[i + 1] * s_in, **extra_args))
            x_3 = x_2 + d_2 * (sigmas[i + 2] - sigmas[i + 1])
            d_3 = to_d(x_3, sigmas[i + 2], model(x_3, sigmas[i + 2] * s_in, **extra_args))
            w = 3 * sigmas[0]
            w2, w3 = sigmas[i + 1] / w, sigmas[i + 2] / w
            x = x + ((1 - w2 - w3) * d + w2 * d_2 + w3 * d_3) * dt
    return x


@torch.no_grad()
def sample_dpm_2(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                 callback: StepCallback = None, disable: Any = None, s_churn: float = 0.0,
                 s_tmin: float = 0.0, s_tmax: float = float("inf"), s_noise: float = 1.0) -> torch.Tensor:
    """Second-order midpoint steps at the geometric-mean sigma, inspired by DPM-Solver-2
    (Lu et al. 2022, arXiv 2206.00927) and Karras et al. 2022 Algorithm 2 (k-diffusion)."""
    extra_args = {} if extra_args is None else extra_args
    s_in = x.new_ones([x.shape[0]])
    for i in range(len(sigmas) - 1):
        x, sigma_hat = churn(x, sigmas, i, s_churn, s_tmin, s_tmax, s_noise)
        denoised = model(x, sigma_hat * s_in, **extra_args)
        if callback is not None:
            callback({"x": x, "i": i, "sigma": sigmas[i], "sigma_hat": sigma_hat, "denoised": denoised})
        d = to_d(x, sigma_hat, denoised)
        if sigmas[i + 1] == 0:
            x = x + d * (sigmas[i + 1] - sigma_hat)  # Euler method
        else:
            sigma_mid = sigma_hat.log().lerp(sigmas[i + 1].log(), 0.5).exp()  # geometric mean
            x_2 = x + d * (sigma_mid - sigma_hat)
            d_2 = to_d(x_2, sigma_mid, model(x_2, sigma_mid * s_in, **extra_args))
            x = x + d_2 * (sigmas[i + 1] - sigma_hat)
    return x


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

    # scipy on first use, not at import: its import (scipy.special, .linalg, ...) is ~0.3 s of a
    # cold prompt's first step that only the LMS samplers need.
    from scipy import integrate

    return integrate.quad(basis, t[i], t[i + 1], epsrel=1e-4)[0]


@torch.no_grad()
def sample_lms(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
               callback: StepCallback = None, disable: Any = None, order: int = 4) -> torch.Tensor:
    """Linear multistep (Adams-Bashforth in sigma) of up to `order`, coefficients by quadrature
    (k-diffusion). As ComfyUI, the step to sigma 0 returns the denoised sample."""
    extra_args = {} if extra_args is None else extra_args
    s_in = x.new_ones([x.shape[0]])
    sigmas_cpu = sigmas.detach().cpu().numpy()
    ds: list[torch.Tensor] = []
    for i in range(len(sigmas) - 1):
        denoised = model(x, sigmas[i] * s_in, **extra_args)
        if callback is not None:
            callback({"x": x, "i": i, "sigma": sigmas[i], "sigma_hat": sigmas[i], "denoised": denoised})
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
    """DPM-Solver++(2M): Lu et al. 2022, "DPM-Solver++" (arXiv 2211.01095), Algorithm 2, in
    t = -log sigma (the half-log-SNR of an eps/v model)."""
    extra_args = {} if extra_args is None else extra_args
    s_in = x.new_ones([x.shape[0]])
    old_denoised = None
    for i in range(len(sigmas) - 1):
        denoised = model(x, sigmas[i] * s_in, **extra_args)
        if callback is not None:
            callback({"x": x, "i": i, "sigma": sigmas[i], "sigma_hat": sigmas[i], "denoised": denoised})
        t, t_next = half_log_snr(sigmas[i]), half_log_snr(sigmas[i + 1])
        h = t_next - t
        ratio = t_next.neg().exp() / t.neg().exp()  # sigma_{i+1}/sigma_i, rounded as ComfyUI
        if old_denoised is None or sigmas[i + 1] == 0:
            x = ratio * x - (-h).expm1() * denoised  # first order (DPM-Solver++(1) = DDIM)
        else:
            r = (t + sigmas[i - 1].log()) / h  # h_last / h
            denoised_d = (1 + 1 / (2 * r)) * denoised - (1 / (2 * r)) * old_denoised
            x = ratio * x - (-h).expm1() * denoised_d
        old_denoised = denoised
    return x


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
    Integrator", iPNDM): fixed-coefficient Adams-Bashforth in sigma on the ODE derivative, up to 4th
    order; the last step denoises."""
    extra_args = {} if extra_args is None else extra_args
    s_in = x.new_ones([x.shape[0]])
    history: list[torch.Tensor] = []  # the previous max_order - 1 derivatives, oldest first
    for i in range(len(sigmas) - 1):
        denoised = model(x, sigmas[i] * s_in, **extra_args)
        if callback is not None:
            callback({"x": x, "i": i, "sigma": sigmas[i], "sigma_hat": sigmas[i], "denoised": denoised})
        d = (x - denoised) / sigmas[i]
        order = min(max_order, i + 1)
        dt = sigmas[i + 1] - sigmas[i]
        if sigmas[i + 1] == 0:
            x_next = denoised
        elif order == 1:
            x_next = x + dt * d
        elif order == 2:  # Adams-Bashforth coefficients for equal steps
            x_next = x + dt * (3 * d - history[-1]) / 2
        elif order == 3:
            x_next = x + dt * (23 * d - 16 * history[-1] + 5 * history[-2]) / 12
        else:
            x_next = x + dt * (55 * d - 59 * history[-1] + 37 * history[-2] - 9 * history[-3]) / 24
        history.append(d)
        if len(history) > max_order - 1:
            history.pop(0)
        x = x_next
    return x


@torch.no_grad()
def sample_ipndm_v(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                   callback: StepCallback = None, disable: Any = None, max_order: int = 4) -> torch.Tensor:
    """iPNDM with variable-step Adams-Bashforth coefficients (Zhang & Chen 2023)."""
    extra_args = {} if extra_args is None else extra_args
    s_in = x.new_ones([x.shape[0]])
    history: list[torch.Tensor] = []  # the previous max_order - 1 derivatives, oldest first
    for i in range(len(sigmas) - 1):
        denoised = model(x, sigmas[i] * s_in, **extra_args)
        if callback is not None:
            callback({"x": x, "i": i, "sigma": sigmas[i], "sigma_hat": sigmas[i], "denoised": denoised})
        d = (x - denoised) / sigmas[i]
        order = min(max_order, i + 1)
        dt = sigmas[i + 1] - sigmas[i]
        if sigmas[i + 1] == 0:
            x_next = denoised
        elif order == 1:
            x_next = x + dt * d
        else:
            x_next = x + dt * _ipndm_v_combination(sigmas, i, order, d, history)
        history.append(d)
        if len(history) > max_order - 1:
            history.pop(0)
        x = x_next
    return x
