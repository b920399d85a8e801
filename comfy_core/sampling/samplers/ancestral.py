"""Ancestral and other fresh-noise samplers: euler_ancestral, dpm_2_ancestral,
dpmpp_2s_ancestral, ddpm, lcm.

Noise per step comes from `noise_sampler`, by default `default_noise_sampler(x, seed)` seeded
from `extra_args["seed"]` exactly as ComfyUI does. On a rectified-flow model sampling (ComfyUI's `CONST`,
e.g. an SD model after ModelSamplingSD3) euler_ancestral, dpm_2_ancestral and dpmpp_2s_ancestral
run their flow forms (`ancestral_rf`), as ComfyUI's do.
"""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.sampling.noise import NoiseSampler
from comfy_core.sampling.samplers import ancestral_rf
from comfy_core.sampling.samplers.common import (Denoiser, StepCallback, StepDenoiser, get_ancestral_step,
                                                 half_log_snr, seeded_noise_sampler, sigma_of_half_log_snr, to_d)


@torch.no_grad()
def sample_euler_ancestral(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                           callback: StepCallback = None, disable: Any = None, eta: float = 1.0,
                           s_noise: float = 1.0, noise_sampler: NoiseSampler | None = None) -> torch.Tensor:
    """Euler steps to sigma_down plus fresh noise sigma_up: ancestral sampling (Ho et al. 2020) in
    Karras et al.'s ODE form (k-diffusion). A step whose sigma_down is 0 returns `denoised` (ComfyUI)."""
    if ancestral_rf.is_flow_model(model):
        return ancestral_rf.sample_euler_ancestral_RF(
            model, x, sigmas, extra_args, callback, disable, eta, s_noise, noise_sampler)
    extra_args = {} if extra_args is None else extra_args
    noise_sampler = seeded_noise_sampler(x, extra_args, noise_sampler)
    s_in = x.new_ones([x.shape[0]])
    for i in range(len(sigmas) - 1):
        denoised = model(x, sigmas[i] * s_in, **extra_args)
        if callback is not None:
            callback({"x": x, "i": i, "sigma": sigmas[i], "sigma_hat": sigmas[i], "denoised": denoised})
        sigma_down, sigma_up = get_ancestral_step(sigmas[i], sigmas[i + 1], eta=eta)
        if sigma_down == 0:
            x = denoised
        else:
            d = to_d(x, sigmas[i], denoised)
            x = x + d * (sigma_down - sigmas[i])  # Euler step to sigma_down
            x = x + noise_sampler(sigmas[i], sigmas[i + 1]) * s_noise * sigma_up
    return x


@torch.no_grad()
def sample_dpm_2_ancestral(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                           callback: StepCallback = None, disable: Any = None, eta: float = 1.0,
                           s_noise: float = 1.0, noise_sampler: NoiseSampler | None = None) -> torch.Tensor:
    """`dpm_2` (geometric-midpoint second-order step) to sigma_down, plus ancestral noise (k-diffusion)."""
    if ancestral_rf.is_flow_model(model):
        return ancestral_rf.sample_dpm_2_ancestral_RF(
            model, x, sigmas, extra_args, callback, disable, eta, s_noise, noise_sampler)
    extra_args = {} if extra_args is None else extra_args
    noise_sampler = seeded_noise_sampler(x, extra_args, noise_sampler)
    s_in = x.new_ones([x.shape[0]])
    for i in range(len(sigmas) - 1):
        denoised = model(x, sigmas[i] * s_in, **extra_args)
        if callback is not None:
            callback({"x": x, "i": i, "sigma": sigmas[i], "sigma_hat": sigmas[i], "denoised": denoised})
        sigma_down, sigma_up = get_ancestral_step(sigmas[i], sigmas[i + 1], eta=eta)
        d = to_d(x, sigmas[i], denoised)
        if sigma_down == 0:
            x = x + d * (sigma_down - sigmas[i])  # Euler method
        else:
            sigma_mid = sigmas[i].log().lerp(sigma_down.log(), 0.5).exp()  # geometric mean
            x_2 = x + d * (sigma_mid - sigmas[i])
            d_2 = to_d(x_2, sigma_mid, model(x_2, sigma_mid * s_in, **extra_args))
            x = x + d_2 * (sigma_down - sigmas[i])
            x = x + noise_sampler(sigmas[i], sigmas[i + 1]) * s_noise * sigma_up
    return x


@torch.no_grad()
def sample_dpmpp_2s_ancestral(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                              callback: StepCallback = None, disable: Any = None, eta: float = 1.0,
                              s_noise: float = 1.0, noise_sampler: NoiseSampler | None = None) -> torch.Tensor:
    """DPM-Solver++(2S) single-step second order (Lu et al. 2022, arXiv 2211.01095, Algorithm 1)
    to sigma_down, plus ancestral noise (k-diffusion), in t = -log sigma."""
    if ancestral_rf.is_flow_model(model):
        return ancestral_rf.sample_dpmpp_2s_ancestral_RF(
            model, x, sigmas, extra_args, callback, disable, eta, s_noise, noise_sampler)
    extra_args = {} if extra_args is None else extra_args
    noise_sampler = seeded_noise_sampler(x, extra_args, noise_sampler)
    s_in = x.new_ones([x.shape[0]])
    for i in range(len(sigmas) - 1):
        denoised = model(x, sigmas[i] * s_in, **extra_args)
        if callback is not None:
            callback({"x": x, "i": i, "sigma": sigmas[i], "sigma_hat": sigmas[i], "denoised": denoised})
        sigma_down, sigma_up = get_ancestral_step(sigmas[i], sigmas[i + 1], eta=eta)
        if sigma_down == 0:
            x = x + to_d(x, sigmas[i], denoised) * (sigma_down - sigmas[i])  # Euler method
        else:
            t, t_next = half_log_snr(sigmas[i]), half_log_snr(sigma_down)
            h = t_next - t
            s = t + 0.5 * h  # the midpoint in t
            x_2 = (sigma_of_half_log_snr(s) / sigma_of_half_log_snr(t)) * x - (-h * 0.5).expm1() * denoised
            denoised_2 = model(x_2, sigma_of_half_log_snr(s) * s_in, **extra_args)
            x = (sigma_of_half_log_snr(t_next) / sigma_of_half_log_snr(t)) * x - (-h).expm1() * denoised_2
        if sigmas[i + 1] > 0:
            x = x + noise_sampler(sigmas[i], sigmas[i + 1]) * s_noise * sigma_up
    return x


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
            # the model sampling's `noise_scaling` (ComfyUI's): `x + sigma * noise` for eps / v,
            # `sigma * noise_scale * noise + (1 - sigma) * x` for flow models
            sampling = getattr(model, "model_sampling", None)
            x = noise * sigmas[i + 1] + x if sampling is None else sampling.noise_scaling(sigmas[i + 1], noise, x)
    return x
