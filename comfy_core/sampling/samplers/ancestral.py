"""Ancestral and other fresh-noise samplers: euler_ancestral, dpm_2_ancestral,
dpmpp_2s_ancestral, ddpm, lcm.

Noise per step comes from `noise_sampler`, by default `default_noise_sampler(x, seed)` seeded
from `extra_args["seed"]` exactly as ComfyUI does. On a rectified-flow model sampling (ComfyUI's `CONST`,
e.g. an SD model after ModelSamplingSD3) euler_ancestral, dpm_2_ancestral and dpmpp_2s_ancestral
run their flow forms (`ancestral_rf`), as ComfyUI's do.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from comfy_core.sampling.noise import NoiseSampler
from comfy_core.sampling.samplers import ancestral_rf
from comfy_core.sampling.samplers.common import (Denoiser, StepCallback, StepDenoiser, get_ancestral_step,
                                                 half_log_snr, seeded_noise_sampler, sigma_of_half_log_snr, to_d)


ToSigmaDown = Callable[[StepDenoiser, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def _ancestral(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None,
               callback: StepCallback, eta: float, s_noise: float, noise_sampler: NoiseSampler | None,
               to_sigma_down: ToSigmaDown, noise_unless_down_is_zero: bool) -> torch.Tensor:
    """Ancestral sampling (Ho et al. 2020) in Karras et al.'s ODE form (k-diffusion): split each
    step into a deterministic `to_sigma_down(run, x, denoised, sigma, sigma_down) -> x` and fresh
    noise of std sigma_up (`get_ancestral_step`).

    ComfyUI adds the noise whenever sigma_{i+1} > 0, except for euler/dpm_2 ancestral, which skip
    it when sigma_down is 0 (`noise_unless_down_is_zero`); the two differ only when eta > 1.
    """
    run = StepDenoiser(model, x, extra_args, callback)
    noise_sampler = seeded_noise_sampler(x, run.extra_args, noise_sampler)
    for i in range(len(sigmas) - 1):
        denoised = run.step(x, sigmas, i)
        sigma_down, sigma_up = get_ancestral_step(sigmas[i], sigmas[i + 1], eta=eta)
        x = to_sigma_down(run, x, denoised, sigmas[i], sigma_down)
        if (sigma_down != 0) if noise_unless_down_is_zero else (sigmas[i + 1] > 0):
            x = x + noise_sampler(sigmas[i], sigmas[i + 1]) * s_noise * sigma_up
    return x


def _euler_to(run: StepDenoiser, x: torch.Tensor, denoised: torch.Tensor, sigma: torch.Tensor,
              sigma_down: torch.Tensor) -> torch.Tensor:
    if sigma_down == 0:
        return denoised
    return x + to_d(x, sigma, denoised) * (sigma_down - sigma)


def _dpm_2_to(run: StepDenoiser, x: torch.Tensor, denoised: torch.Tensor, sigma: torch.Tensor,
              sigma_down: torch.Tensor) -> torch.Tensor:
    d = to_d(x, sigma, denoised)
    if sigma_down == 0:
        return x + d * (sigma_down - sigma)
    sigma_mid = sigma.log().lerp(sigma_down.log(), 0.5).exp()
    x_2 = x + d * (sigma_mid - sigma)
    d_2 = to_d(x_2, sigma_mid, run(x_2, sigma_mid))
    return x + d_2 * (sigma_down - sigma)


def _dpmpp_2s_to(run: StepDenoiser, x: torch.Tensor, denoised: torch.Tensor, sigma: torch.Tensor,
                 sigma_down: torch.Tensor) -> torch.Tensor:
    if sigma_down == 0:
        return x + to_d(x, sigma, denoised) * (sigma_down - sigma)
    t, t_next = half_log_snr(sigma), half_log_snr(sigma_down)
    h = t_next - t
    s = t + 0.5 * h
    x_2 = (sigma_of_half_log_snr(s) / sigma_of_half_log_snr(t)) * x - (-h * 0.5).expm1() * denoised
    denoised_2 = run(x_2, sigma_of_half_log_snr(s))
    return (sigma_of_half_log_snr(t_next) / sigma_of_half_log_snr(t)) * x - (-h).expm1() * denoised_2


@torch.no_grad()
def sample_euler_ancestral(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                           callback: StepCallback = None, disable: Any = None, eta: float = 1.0,
                           s_noise: float = 1.0, noise_sampler: NoiseSampler | None = None) -> torch.Tensor:
    """Euler steps to sigma_down plus fresh noise sigma_up: ancestral sampling (Ho et al. 2020) in
    Karras et al.'s ODE form (k-diffusion). A step whose sigma_down is 0 returns `denoised` (ComfyUI)."""
    if ancestral_rf.is_flow_model(model):
        return ancestral_rf.sample_euler_ancestral_RF(
            model, x, sigmas, extra_args, callback, disable, eta, s_noise, noise_sampler)
    return _ancestral(model, x, sigmas, extra_args, callback, eta, s_noise, noise_sampler, _euler_to, True)


@torch.no_grad()
def sample_dpm_2_ancestral(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                           callback: StepCallback = None, disable: Any = None, eta: float = 1.0,
                           s_noise: float = 1.0, noise_sampler: NoiseSampler | None = None) -> torch.Tensor:
    """`dpm_2` (geometric-midpoint second-order step) to sigma_down, plus ancestral noise (k-diffusion)."""
    if ancestral_rf.is_flow_model(model):
        return ancestral_rf.sample_dpm_2_ancestral_RF(
            model, x, sigmas, extra_args, callback, disable, eta, s_noise, noise_sampler)
    return _ancestral(model, x, sigmas, extra_args, callback, eta, s_noise, noise_sampler, _dpm_2_to, True)


@torch.no_grad()
def sample_dpmpp_2s_ancestral(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                              callback: StepCallback = None, disable: Any = None, eta: float = 1.0,
                              s_noise: float = 1.0, noise_sampler: NoiseSampler | None = None) -> torch.Tensor:
    """DPM-Solver++(2S) single-step second order (Lu et al. 2022, arXiv 2211.01095, Algorithm 1)
    to sigma_down, plus ancestral noise (k-diffusion)."""
    if ancestral_rf.is_flow_model(model):
        return ancestral_rf.sample_dpmpp_2s_ancestral_RF(
            model, x, sigmas, extra_args, callback, disable, eta, s_noise, noise_sampler)
    return _ancestral(model, x, sigmas, extra_args, callback, eta, s_noise, noise_sampler, _dpmpp_2s_to, False)


def _ddpm_step(x_vp: torch.Tensor, sigma: torch.Tensor, sigma_prev: torch.Tensor, eps: torch.Tensor,
               noise_sampler: NoiseSampler) -> torch.Tensor:
    """One DDPM posterior step (Ho et al. 2020, Algorithm 2) in VP scale, between two sigmas."""
    alpha_cumprod = 1 / (sigma * sigma + 1)
    alpha_cumprod_prev = 1 / (sigma_prev * sigma_prev + 1)
    alpha = alpha_cumprod / alpha_cumprod_prev
    mu = (1.0 / alpha).sqrt() * (x_vp - (1 - alpha) * eps / (1 - alpha_cumprod).sqrt())
    if sigma_prev > 0:
        mu = mu + ((1 - alpha) * (1.0 - alpha_cumprod_prev) / (1.0 - alpha_cumprod)).sqrt() * noise_sampler(sigma, sigma_prev)
    return mu


@torch.no_grad()
def sample_ddpm(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                callback: StepCallback = None, disable: Any = None,
                noise_sampler: NoiseSampler | None = None) -> torch.Tensor:
    """Ancestral DDPM sampling (Ho et al. 2020, Algorithm 2) on an arbitrary sigma schedule:
    convert to VP scale, take the posterior step, convert back (ComfyUI's generic step sampler)."""
    run = StepDenoiser(model, x, extra_args, callback)
    noise_sampler = seeded_noise_sampler(x, run.extra_args, noise_sampler)
    for i in range(len(sigmas) - 1):
        denoised = run.step(x, sigmas, i)
        eps = (x - denoised) / sigmas[i]
        x = _ddpm_step(x / torch.sqrt(1.0 + sigmas[i] ** 2.0), sigmas[i], sigmas[i + 1], eps, noise_sampler)
        if sigmas[i + 1] != 0:
            x = x * torch.sqrt(1.0 + sigmas[i + 1] ** 2.0)
    return x


@torch.no_grad()
def sample_lcm(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
               callback: StepCallback = None, disable: Any = None, noise_sampler: NoiseSampler | None = None,
               s_noise: float = 1.0, s_noise_end: float | None = None, noise_clip_std: float = 0.0) -> torch.Tensor:
    """Latent Consistency Model multistep sampling (Luo et al. 2023, arXiv 2310.04378, Algorithm 1):
    jump to the x0 prediction, re-noise to the next sigma.

    `s_noise` (linearly to `s_noise_end` over the steps) scales the fresh noise and
    `noise_clip_std` > 0 clamps it to that many standard deviations, as in ComfyUI.
    """
    run = StepDenoiser(model, x, extra_args, callback)
    noise_sampler = seeded_noise_sampler(x, run.extra_args, noise_sampler)
    n_steps = max(1, len(sigmas) - 1)
    s_start = float(s_noise)
    s_end = s_start if s_noise_end is None else float(s_noise_end)
    for i in range(len(sigmas) - 1):
        denoised = run.step(x, sigmas, i)
        x = denoised
        if sigmas[i + 1] > 0:
            noise = noise_sampler(sigmas[i], sigmas[i + 1])
            if noise_clip_std > 0:
                clip = noise_clip_std * noise.std()
                noise = noise.clamp(min=-clip, max=clip)
            frac = (i / (n_steps - 1)) if n_steps > 1 else 0.0
            s_noise_i = s_start + (s_end - s_start) * frac
            if s_noise_i != 1.0:
                noise = noise * s_noise_i
            x = noise * sigmas[i + 1] + x  # ModelSampling.noise_scaling for eps/v models
    return x
