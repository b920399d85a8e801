"""Stochastic exponential-integrator samplers in data prediction: er_sde, seeds_2, seeds_3.

Written for eps/v models (alpha = 1, half-log-SNR lambda = -log sigma), after ComfyUI's
`comfy/k_diffusion/sampling.py`; noise from `default_noise_sampler` seeded with the sampling seed.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from comfy_core.sampling.noise import NoiseSampler, default_noise_sampler
from comfy_core.sampling.samplers.common import Denoiser, StepCallback, report


def _lambda(sigma: torch.Tensor) -> torch.Tensor:
    return sigma.log().neg()


def _sigma(lam: torch.Tensor) -> torch.Tensor:
    return lam.neg().exp()


def ei_h_phi_1(h: torch.Tensor) -> torch.Tensor:
    """h * phi_1(h) = e^h - 1."""
    return torch.expm1(h)


def ei_h_phi_2(h: torch.Tensor) -> torch.Tensor:
    """h * phi_2(h) = (e^h - 1 - h) / h."""
    return (torch.expm1(h) - h) / h


def _default_er_sde_noise_scaler(x: torch.Tensor) -> torch.Tensor:
    return x * ((x ** 0.3).exp() + 10.0)


@torch.no_grad()
def sample_er_sde(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                  callback: StepCallback = None, disable: Any = None, s_noise: float = 1.0,
                  noise_sampler: NoiseSampler | None = None,
                  noise_scaler: Callable[[torch.Tensor], torch.Tensor] | None = None, max_stage: int = 3) -> torch.Tensor:
    """Extended reverse-time SDE solver, VP ER-SDE-Solver-3 (Cui et al. 2023, "Elucidating the solution
    space of extended reverse-time SDE for diffusion models", arXiv 2309.06169), 200-point quadrature."""
    extra_args = {} if extra_args is None else extra_args
    if noise_sampler is None:
        noise_sampler = default_noise_sampler(x, seed=extra_args.get("seed"))
    scaler = _default_er_sde_noise_scaler if noise_scaler is None else noise_scaler
    s_in = x.new_ones([x.shape[0]])
    n_points = 200.0
    points = torch.arange(0, n_points, dtype=torch.float32, device=x.device)
    er_lambdas = _lambda(sigmas).neg().exp()  # sigma_t / alpha_t
    old_denoised = old_denoised_d = None
    for i in range(len(sigmas) - 1):
        denoised = model(x, sigmas[i] * s_in, **extra_args)
        report(callback, x, i, sigmas[i], sigmas[i], denoised)
        stage = min(max_stage, i + 1)
        if sigmas[i + 1] == 0:
            x = denoised
        else:
            lam_s, lam_t = er_lambdas[i], er_lambdas[i + 1]
            alpha_s, alpha_t = sigmas[i] / lam_s, sigmas[i + 1] / lam_t
            r = scaler(lam_t) / scaler(lam_s)
            x = (alpha_t / alpha_s) * r * x + alpha_t * (1 - r) * denoised
            if stage >= 2:
                dt = lam_t - lam_s
                step = -dt / n_points
                pos = lam_t + points * step
                scaled = scaler(pos)
                s = torch.sum(1 / scaled) * step
                denoised_d = (denoised - old_denoised) / (lam_s - er_lambdas[i - 1])
                x = x + alpha_t * (dt + s * scaler(lam_t)) * denoised_d
                if stage >= 3:
                    s_u = torch.sum((pos - lam_s) / scaled) * step
                    denoised_u = (denoised_d - old_denoised_d) / ((lam_s - er_lambdas[i - 2]) / 2)
                    x = x + alpha_t * ((dt ** 2) / 2 + s_u * scaler(lam_t)) * denoised_u
                old_denoised_d = denoised_d
            if s_noise > 0:
                amp = (lam_t ** 2 - lam_s ** 2 * r ** 2).sqrt().nan_to_num(nan=0.0)
                x = x + alpha_t * noise_sampler(sigmas[i], sigmas[i + 1]) * s_noise * amp
        old_denoised = denoised
    return x


@torch.no_grad()
def sample_seeds_2(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                   callback: StepCallback = None, disable: Any = None, eta: float = 1.0, s_noise: float = 1.0,
                   noise_sampler: NoiseSampler | None = None, r: float = 0.5, solver_type: str = "phi_1") -> torch.Tensor:
    """SEEDS-2 (Gonzalez et al. 2023, "SEEDS: Exponential SDE Solvers for Fast High-Quality Sampling
    from Diffusion Models", arXiv 2305.14267), VP data prediction, two stages."""
    if solver_type not in ("phi_1", "phi_2"):
        raise ValueError(f"sample_seeds_2: solver_type must be 'phi_1' or 'phi_2', got {solver_type!r}")
    extra_args = {} if extra_args is None else extra_args
    if noise_sampler is None:
        noise_sampler = default_noise_sampler(x, seed=extra_args.get("seed"))
    s_in = x.new_ones([x.shape[0]])
    inject = eta > 0 and s_noise > 0
    fac = 1 / (2 * r)
    for i in range(len(sigmas) - 1):
        denoised = model(x, sigmas[i] * s_in, **extra_args)
        report(callback, x, i, sigmas[i], sigmas[i], denoised)
        if sigmas[i + 1] == 0:
            x = denoised
            continue
        lam_s, lam_t = _lambda(sigmas[i]), _lambda(sigmas[i + 1])
        h = lam_t - lam_s
        h_eta = h * (eta + 1)
        lam_s1 = torch.lerp(lam_s, lam_t, r)
        sigma_s1 = _sigma(lam_s1)
        alpha_s1 = sigma_s1 * lam_s1.exp()
        alpha_t = sigmas[i + 1] * lam_t.exp()
        x_2 = sigma_s1 / sigmas[i] * (-r * h * eta).exp() * x - alpha_s1 * ei_h_phi_1(-r * h_eta) * denoised
        if inject:
            sde_noise = (-2 * r * h * eta).expm1().neg().sqrt() * noise_sampler(sigmas[i], sigma_s1)
            x_2 = x_2 + sde_noise * sigma_s1 * s_noise
        denoised_2 = model(x_2, sigma_s1 * s_in, **extra_args)
        if solver_type == "phi_1":
            denoised_d = torch.lerp(denoised, denoised_2, fac)
            x = sigmas[i + 1] / sigmas[i] * (-h * eta).exp() * x - alpha_t * ei_h_phi_1(-h_eta) * denoised_d
        else:
            b2 = ei_h_phi_2(-h_eta) / r
            b1 = ei_h_phi_1(-h_eta) - b2
            x = sigmas[i + 1] / sigmas[i] * (-h * eta).exp() * x - alpha_t * (b1 * denoised + b2 * denoised_2)
        if inject:
            seg = (r - 1) * h * eta
            sde_noise = sde_noise * seg.exp() + seg.mul(2).expm1().neg().sqrt() * noise_sampler(sigma_s1, sigmas[i + 1])
            x = x + sde_noise * sigmas[i + 1] * s_noise
    return x


@torch.no_grad()
def sample_seeds_3(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                   callback: StepCallback = None, disable: Any = None, eta: float = 1.0, s_noise: float = 1.0,
                   noise_sampler: NoiseSampler | None = None, r_1: float = 1.0 / 3, r_2: float = 2.0 / 3) -> torch.Tensor:
    """SEEDS-3 (Gonzalez et al. 2023, arXiv 2305.14267), VP data prediction, three stages."""
    extra_args = {} if extra_args is None else extra_args
    if noise_sampler is None:
        noise_sampler = default_noise_sampler(x, seed=extra_args.get("seed"))
    s_in = x.new_ones([x.shape[0]])
    inject = eta > 0 and s_noise > 0
    for i in range(len(sigmas) - 1):
        denoised = model(x, sigmas[i] * s_in, **extra_args)
        report(callback, x, i, sigmas[i], sigmas[i], denoised)
        if sigmas[i + 1] == 0:
            x = denoised
            continue
        lam_s, lam_t = _lambda(sigmas[i]), _lambda(sigmas[i + 1])
        h = lam_t - lam_s
        h_eta = h * (eta + 1)
        lam_s1, lam_s2 = torch.lerp(lam_s, lam_t, r_1), torch.lerp(lam_s, lam_t, r_2)
        sigma_s1, sigma_s2 = _sigma(lam_s1), _sigma(lam_s2)
        alpha_s1, alpha_s2 = sigma_s1 * lam_s1.exp(), sigma_s2 * lam_s2.exp()
        alpha_t = sigmas[i + 1] * lam_t.exp()
        x_2 = sigma_s1 / sigmas[i] * (-r_1 * h * eta).exp() * x - alpha_s1 * ei_h_phi_1(-r_1 * h_eta) * denoised
        if inject:
            sde_noise = (-2 * r_1 * h * eta).expm1().neg().sqrt() * noise_sampler(sigmas[i], sigma_s1)
            x_2 = x_2 + sde_noise * sigma_s1 * s_noise
        denoised_2 = model(x_2, sigma_s1 * s_in, **extra_args)
        a3_2 = r_2 / r_1 * ei_h_phi_2(-r_2 * h_eta)
        a3_1 = ei_h_phi_1(-r_2 * h_eta) - a3_2
        x_3 = sigma_s2 / sigmas[i] * (-r_2 * h * eta).exp() * x - alpha_s2 * (a3_1 * denoised + a3_2 * denoised_2)
        if inject:
            seg = (r_1 - r_2) * h * eta
            sde_noise = sde_noise * seg.exp() + seg.mul(2).expm1().neg().sqrt() * noise_sampler(sigma_s1, sigma_s2)
            x_3 = x_3 + sde_noise * sigma_s2 * s_noise
        denoised_3 = model(x_3, sigma_s2 * s_in, **extra_args)
        b3 = ei_h_phi_2(-h_eta) / r_2
        b1 = ei_h_phi_1(-h_eta) - b3
        x = sigmas[i + 1] / sigmas[i] * (-h * eta).exp() * x - alpha_t * (b1 * denoised + b3 * denoised_3)
        if inject:
            seg = (r_2 - 1) * h * eta
            sde_noise = sde_noise * seg.exp() + seg.mul(2).expm1().neg().sqrt() * noise_sampler(sigma_s2, sigmas[i + 1])
            x = x + sde_noise * sigmas[i + 1] * s_noise
    return x
