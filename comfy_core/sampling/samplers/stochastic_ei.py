"""Stochastic exponential-integrator samplers in data prediction: er_sde, seeds_2, seeds_3.

Written for eps/v models (alpha = 1, half-log-SNR lambda = -log sigma), after ComfyUI's
`comfy/k_diffusion/sampling.py`; noise from `default_noise_sampler` seeded with the sampling seed.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from comfy_core.sampling.noise import NoiseSampler
from comfy_core.sampling.samplers.common import (Denoiser, StepCallback, StepDenoiser, half_log_snr,
                                                 seeded_noise_sampler, sigma_of_half_log_snr)
from comfy_core.sampling.samplers.exponential import ExponentialStep, sde_decay, sde_first_order


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
    run = StepDenoiser(model, x, extra_args, callback)
    noise_sampler = seeded_noise_sampler(x, run.extra_args, noise_sampler)
    scaler = _default_er_sde_noise_scaler if noise_scaler is None else noise_scaler
    n_points = 200.0
    points = torch.arange(0, n_points, dtype=torch.float32, device=x.device)
    er_lambdas = sigma_of_half_log_snr(half_log_snr(sigmas))  # sigma_t / alpha_t
    old_denoised = old_denoised_d = None
    for i in range(len(sigmas) - 1):
        denoised = run.step(x, sigmas, i)
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


def _first_stage(step: ExponentialStep, x: torch.Tensor, denoised: torch.Tensor, r: float,
                 noise_sampler: NoiseSampler, s_noise: float,
                 inject: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """SEEDS' first stage: the first-order step from sigma to lambda_s1 = lambda + r h.

    Returns (sigma_s1, x at s1, the unit noise drawn for it or None without noise).
    """
    lam_s1 = torch.lerp(step.lam, step.lam_next, r)
    sigma_s1 = sigma_of_half_log_snr(lam_s1)
    alpha_s1 = sigma_s1 * lam_s1.exp()
    x_2 = sigma_s1 / step.sigma * (-r * step.h * step.eta).exp() * x - alpha_s1 * ei_h_phi_1(-r * step.h_eta) * denoised
    noise = None
    if inject:
        noise = (-2 * r * step.h * step.eta).expm1().neg().sqrt() * noise_sampler(step.sigma, sigma_s1)
        x_2 = x_2 + noise * sigma_s1 * s_noise
    return sigma_s1, x_2, noise


def _chained_noise(previous: torch.Tensor, seg: torch.Tensor, fresh: torch.Tensor) -> torch.Tensor:
    """SEEDS' correlated stage noise: the previous stage's unit noise decayed by e^seg plus fresh
    noise of variance 1 - e^(2 seg), so the sum keeps unit variance (seg = (r_from - r_to) h eta)."""
    return previous * seg.exp() + seg.mul(2).expm1().neg().sqrt() * fresh


SeedsStages = Callable[[StepDenoiser, ExponentialStep, torch.Tensor, torch.Tensor, NoiseSampler, bool], torch.Tensor]


def _seeds(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None,
           callback: StepCallback, eta: float, s_noise: float, noise_sampler: NoiseSampler | None,
           stages: SeedsStages) -> torch.Tensor:
    """The SEEDS loop (Gonzalez et al. 2023): evaluate and report D at sigma_i, then
    `stages(run, step, x, denoised, noise_sampler, inject) -> x` to sigma_{i+1} (noise is injected
    when eta > 0 and s_noise > 0); the step to sigma 0 returns the denoised sample."""
    run = StepDenoiser(model, x, extra_args, callback)
    noise_sampler = seeded_noise_sampler(x, run.extra_args, noise_sampler)
    inject = eta > 0 and s_noise > 0
    for i in range(len(sigmas) - 1):
        denoised = run.step(x, sigmas, i)
        if sigmas[i + 1] == 0:
            x = denoised
        else:
            x = stages(run, ExponentialStep.between(sigmas[i], sigmas[i + 1], eta), x, denoised, noise_sampler, inject)
    return x


@torch.no_grad()
def sample_seeds_2(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                   callback: StepCallback = None, disable: Any = None, eta: float = 1.0, s_noise: float = 1.0,
                   noise_sampler: NoiseSampler | None = None, r: float = 0.5, solver_type: str = "phi_1") -> torch.Tensor:
    """SEEDS-2 (Gonzalez et al. 2023, "SEEDS: Exponential SDE Solvers for Fast High-Quality Sampling
    from Diffusion Models", arXiv 2305.14267), VP data prediction, two stages."""
    if solver_type not in ("phi_1", "phi_2"):
        raise ValueError(f"sample_seeds_2: solver_type must be 'phi_1' or 'phi_2', got {solver_type!r}")
    fac = 1 / (2 * r)

    def stages(run: StepDenoiser, step: ExponentialStep, x: torch.Tensor, denoised: torch.Tensor,
               noise_sampler: NoiseSampler, inject: bool) -> torch.Tensor:
        sigma_s1, x_2, sde_noise = _first_stage(step, x, denoised, r, noise_sampler, s_noise, inject)
        denoised_2 = run(x_2, sigma_s1)
        if solver_type == "phi_1":
            x = sde_first_order(step, x, torch.lerp(denoised, denoised_2, fac))
        else:
            b2 = ei_h_phi_2(-step.h_eta) / r
            b1 = ei_h_phi_1(-step.h_eta) - b2
            x = sde_decay(step, x) - step.alpha_next * (b1 * denoised + b2 * denoised_2)
        if inject:
            sde_noise = _chained_noise(sde_noise, (r - 1) * step.h * eta, noise_sampler(sigma_s1, step.sigma_next))
            x = x + sde_noise * step.sigma_next * s_noise
        return x

    return _seeds(model, x, sigmas, extra_args, callback, eta, s_noise, noise_sampler, stages)


@torch.no_grad()
def sample_seeds_3(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                   callback: StepCallback = None, disable: Any = None, eta: float = 1.0, s_noise: float = 1.0,
                   noise_sampler: NoiseSampler | None = None, r_1: float = 1.0 / 3, r_2: float = 2.0 / 3) -> torch.Tensor:
    """SEEDS-3 (Gonzalez et al. 2023, arXiv 2305.14267), VP data prediction, three stages."""

    def stages(run: StepDenoiser, step: ExponentialStep, x: torch.Tensor, denoised: torch.Tensor,
               noise_sampler: NoiseSampler, inject: bool) -> torch.Tensor:
        h, h_eta = step.h, step.h_eta
        sigma_s1, x_2, sde_noise = _first_stage(step, x, denoised, r_1, noise_sampler, s_noise, inject)
        denoised_2 = run(x_2, sigma_s1)
        lam_s2 = torch.lerp(step.lam, step.lam_next, r_2)
        sigma_s2 = sigma_of_half_log_snr(lam_s2)
        alpha_s2 = sigma_s2 * lam_s2.exp()
        a3_2 = r_2 / r_1 * ei_h_phi_2(-r_2 * h_eta)
        a3_1 = ei_h_phi_1(-r_2 * h_eta) - a3_2
        x_3 = sigma_s2 / step.sigma * (-r_2 * h * eta).exp() * x - alpha_s2 * (a3_1 * denoised + a3_2 * denoised_2)
        if inject:
            sde_noise = _chained_noise(sde_noise, (r_1 - r_2) * h * eta, noise_sampler(sigma_s1, sigma_s2))
            x_3 = x_3 + sde_noise * sigma_s2 * s_noise
        denoised_3 = run(x_3, sigma_s2)
        b3 = ei_h_phi_2(-h_eta) / r_2
        b1 = ei_h_phi_1(-h_eta) - b3
        x = sde_decay(step, x) - step.alpha_next * (b1 * denoised + b3 * denoised_3)
        if inject:
            sde_noise = _chained_noise(sde_noise, (r_2 - 1) * h * eta, noise_sampler(sigma_s2, step.sigma_next))
            x = x + sde_noise * step.sigma_next * s_noise
        return x

    return _seeds(model, x, sigmas, extra_args, callback, eta, s_noise, noise_sampler, stages)
