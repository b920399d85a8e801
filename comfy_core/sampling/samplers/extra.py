"""Newer ComfyUI samplers: CFG++ variants, res_multistep, gradient_estimation, er_sde, seeds_2.

CFG++ (Chung et al. 2024, "CFG++: Manifold-constrained Classifier Free Guidance", arXiv 2406.08070)
renoises with the *unconditional* x0 prediction; the sampler captures it through a
`sampler_post_cfg_function` hook in `extra_args["model_options"]` (and disables the cfg=1 skip),
as ComfyUI does. Written for eps/v models (alpha = 1, lambda = -log sigma), after ComfyUI's
`comfy/k_diffusion/sampling.py`.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from comfy_core.sampling.noise import NoiseSampler
from comfy_core.sampling.samplers.common import (Denoiser, StepCallback, StepDenoiser, get_ancestral_step,
                                                 half_log_snr, seeded_noise_sampler, sigma_of_half_log_snr, to_d)


class CfgPPError(RuntimeError):
    """A CFG++ sampler was given a denoiser that does not run ComfyUI's post-CFG hooks."""


def _capture_uncond(extra_args: dict | None, enabled: bool = True) -> tuple[dict, Callable[[], torch.Tensor] | None]:
    """Copy `extra_args` with a post-CFG hook recording the unconditional x0 prediction, and the
    getter of that prediction (None, and a plain copy, when not `enabled`)."""
    extra_args = dict(extra_args or {})
    if not enabled:
        return extra_args, None
    captured: dict[str, torch.Tensor] = {}

    def post_cfg(args: dict) -> torch.Tensor:
        captured["uncond"] = args["uncond_denoised"]
        return args["denoised"]

    options = dict(extra_args.get("model_options", {}))
    options["sampler_post_cfg_function"] = list(options.get("sampler_post_cfg_function", [])) + [post_cfg]
    options["disable_cfg1_optimization"] = True
    extra_args["model_options"] = options

    def uncond() -> torch.Tensor:
        if "uncond" not in captured:
            raise CfgPPError("CFG++ samplers need the guided denoiser: the model never called the "
                             "sampler_post_cfg_function hook in extra_args['model_options']")
        return captured["uncond"]

    return extra_args, uncond


@torch.no_grad()
def sample_euler_ancestral_cfg_pp(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                                  callback: StepCallback = None, disable: Any = None, eta: float = 1.0,
                                  s_noise: float = 1.0, noise_sampler: NoiseSampler | None = None) -> torch.Tensor:
    """Ancestral Euler with CFG++ (Chung et al. 2024): step along the unconditional direction."""
    extra_args, uncond = _capture_uncond(extra_args)
    run = StepDenoiser(model, x, extra_args, callback)
    noise_sampler = seeded_noise_sampler(x, run.extra_args, noise_sampler)
    for i in range(len(sigmas) - 1):
        denoised = run.step(x, sigmas, i)
        if sigmas[i + 1] == 0:
            x = denoised
            continue
        alpha_s = sigmas[i] * half_log_snr(sigmas[i]).exp()
        alpha_t = sigmas[i + 1] * half_log_snr(sigmas[i + 1]).exp()
        d = to_d(x, sigmas[i], alpha_s * uncond())
        sigma_down, sigma_up = get_ancestral_step(sigmas[i] / alpha_s, sigmas[i + 1] / alpha_t, eta=eta)
        x = alpha_t * denoised + alpha_t * sigma_down * d
        if eta > 0 and s_noise > 0:
            x = x + alpha_t * noise_sampler(sigmas[i], sigmas[i + 1]) * s_noise * sigma_up
    return x


@torch.no_grad()
def sample_euler_cfg_pp(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                        callback: StepCallback = None, disable: Any = None) -> torch.Tensor:
    """Euler with CFG++ (Chung et al. 2024): `sample_euler_ancestral_cfg_pp` without noise."""
    return sample_euler_ancestral_cfg_pp(model, x, sigmas, extra_args, callback, disable, eta=0.0, s_noise=0.0)


@torch.no_grad()
def sample_dpmpp_2m_cfg_pp(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                           callback: StepCallback = None, disable: Any = None) -> torch.Tensor:
    """DPM-Solver++(2M) (Lu et al. 2022) with CFG++ renoising (Chung et al. 2024)."""
    extra_args, uncond = _capture_uncond(extra_args)
    run = StepDenoiser(model, x, extra_args, callback)
    old_uncond = None
    for i in range(len(sigmas) - 1):
        denoised = run.step(x, sigmas, i)
        u = uncond()
        t, t_next = half_log_snr(sigmas[i]), half_log_snr(sigmas[i + 1])
        h = t_next - t
        if old_uncond is None or sigmas[i + 1] == 0:
            mix = -torch.exp(-h) * u
        else:
            r = (t - half_log_snr(sigmas[i - 1])) / h
            mix = -torch.exp(-h) * u - torch.expm1(-h) * (1 / (2 * r)) * (denoised - old_uncond)
        x = denoised + mix + torch.exp(-h) * x
        old_uncond = u
    return x


def _res_multistep(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None,
                   callback: StepCallback, s_noise: float, noise_sampler: NoiseSampler | None, eta: float,
                   cfg_pp: bool) -> torch.Tensor:
    """Second-order multistep exponential integrator (Zhang et al. 2023, "Improved order analysis
    and design of exponential integrator for diffusion models sampling", arXiv 2308.02157; the
    "RES" solver), optionally ancestral and/or CFG++."""
    extra_args, uncond = _capture_uncond(extra_args, enabled=cfg_pp)
    run = StepDenoiser(model, x, extra_args, callback)
    noise_sampler = seeded_noise_sampler(x, run.extra_args, noise_sampler)

    def phi1(t: torch.Tensor) -> torch.Tensor:
        return torch.expm1(t) / t

    def phi2(t: torch.Tensor) -> torch.Tensor:
        return (phi1(t) - 1.0) / t

    old_sigma_down = old_denoised = None
    for i in range(len(sigmas) - 1):
        denoised = run.step(x, sigmas, i)
        sigma_down, sigma_up = get_ancestral_step(sigmas[i], sigmas[i + 1], eta=eta)
        u = uncond() if uncond is not None else None
        if sigma_down == 0 or old_denoised is None:
            if cfg_pp:
                x = denoised + to_d(x, sigmas[i], u) * sigma_down
            else:
                x = x + to_d(x, sigmas[i], denoised) * (sigma_down - sigmas[i])
        else:
            t, t_old = half_log_snr(sigmas[i]), half_log_snr(old_sigma_down)
            t_next, t_prev = half_log_snr(sigma_down), half_log_snr(sigmas[i - 1])
            h = t_next - t
            c2 = (t_prev - t_old) / h
            p1, p2 = phi1(-h), phi2(-h)
            b1 = torch.nan_to_num(p1 - p2 / c2, nan=0.0)
            b2 = torch.nan_to_num(p2 / c2, nan=0.0)
            if cfg_pp:
                x = x + (denoised - u)
                x = h.neg().exp() * x + h * (b1 * u + b2 * old_denoised)
            else:
                x = h.neg().exp() * x + h * (b1 * denoised + b2 * old_denoised)
        if sigmas[i + 1] > 0:
            x = x + noise_sampler(sigmas[i], sigmas[i + 1]) * s_noise * sigma_up
        old_denoised = u if cfg_pp else denoised
        old_sigma_down = sigma_down
    return x


@torch.no_grad()
def sample_res_multistep(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                         callback: StepCallback = None, disable: Any = None, s_noise: float = 1.0,
                         noise_sampler: NoiseSampler | None = None) -> torch.Tensor:
    """RES second-order multistep (deterministic); see `_res_multistep`."""
    return _res_multistep(model, x, sigmas, extra_args, callback, s_noise, noise_sampler, eta=0.0, cfg_pp=False)


@torch.no_grad()
def sample_res_multistep_cfg_pp(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                                callback: StepCallback = None, disable: Any = None, s_noise: float = 1.0,
                                noise_sampler: NoiseSampler | None = None) -> torch.Tensor:
    """RES multistep with CFG++."""
    return _res_multistep(model, x, sigmas, extra_args, callback, s_noise, noise_sampler, eta=0.0, cfg_pp=True)


@torch.no_grad()
def sample_res_multistep_ancestral(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                                   callback: StepCallback = None, disable: Any = None, eta: float = 1.0,
                                   s_noise: float = 1.0, noise_sampler: NoiseSampler | None = None) -> torch.Tensor:
    """RES multistep to sigma_down plus ancestral noise."""
    return _res_multistep(model, x, sigmas, extra_args, callback, s_noise, noise_sampler, eta=eta, cfg_pp=False)


@torch.no_grad()
def sample_res_multistep_ancestral_cfg_pp(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor,
                                          extra_args: dict | None = None, callback: StepCallback = None,
                                          disable: Any = None, eta: float = 1.0, s_noise: float = 1.0,
                                          noise_sampler: NoiseSampler | None = None) -> torch.Tensor:
    """Ancestral RES multistep with CFG++."""
    return _res_multistep(model, x, sigmas, extra_args, callback, s_noise, noise_sampler, eta=eta, cfg_pp=True)


@torch.no_grad()
def sample_gradient_estimation(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                               callback: StepCallback = None, disable: Any = None, ge_gamma: float = 2.0,
                               cfg_pp: bool = False) -> torch.Tensor:
    """Euler with a gradient-estimation correction `(gamma - 1)(d - d_prev) dt` (Permenter & Yuan
    2024, "Interpreting and Improving Diffusion Models from an Optimization Perspective")."""
    extra_args, uncond = _capture_uncond(extra_args, enabled=cfg_pp)
    run = StepDenoiser(model, x, extra_args, callback)
    old_d = None
    for i in range(len(sigmas) - 1):
        denoised = run.step(x, sigmas, i)
        d = to_d(x, sigmas[i], uncond() if uncond is not None else denoised)
        dt = sigmas[i + 1] - sigmas[i]
        if sigmas[i + 1] == 0:
            x = denoised
        else:
            x = denoised + d * sigmas[i + 1] if cfg_pp else x + d * dt
            if i >= 1:
                x = x + (ge_gamma - 1) * (d - old_d) * dt
        old_d = d
    return x


@torch.no_grad()
def sample_gradient_estimation_cfg_pp(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor,
                                      extra_args: dict | None = None, callback: StepCallback = None,
                                      disable: Any = None, ge_gamma: float = 2.0) -> torch.Tensor:
    """Gradient estimation with CFG++."""
    return sample_gradient_estimation(model, x, sigmas, extra_args, callback, disable, ge_gamma, cfg_pp=True)


@torch.no_grad()
def sample_dpmpp_2s_ancestral_cfg_pp(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor,
                                     extra_args: dict | None = None, callback: StepCallback = None,
                                     disable: Any = None, eta: float = 1.0, s_noise: float = 1.0,
                                     noise_sampler: NoiseSampler | None = None) -> torch.Tensor:
    """DPM-Solver++(2S) ancestral (Lu et al. 2022) in CFG++ form (Chung et al. 2024), as ComfyUI
    0.3.64 writes it (`comfy/k_diffusion/sampling.py`), in t = -log(sigma): each sub-step starts
    from `x + (denoised - uncond)` with the uncond most recently predicted (at sigma_i for the
    midpoint, at the midpoint for the final update), and moves with the guided predictions; Euler
    to the unconditional prediction when sigma_down is 0. Later ComfyUI releases changed this sampler; this is 0.3.64's.
    """
    extra_args, uncond = _capture_uncond(extra_args)
    run = StepDenoiser(model, x, extra_args, callback)
    noise_sampler = seeded_noise_sampler(x, run.extra_args, noise_sampler)
    for i in range(len(sigmas) - 1):
        denoised = run.step(x, sigmas, i)
        u = uncond()
        sigma_down, sigma_up = get_ancestral_step(sigmas[i], sigmas[i + 1], eta=eta)
        if sigma_down == 0:
            x = denoised + to_d(x, sigmas[i], u) * sigma_down
        else:
            t, t_next = sigmas[i].log().neg(), sigma_down.log().neg()
            h = t_next - t
            s = t + 0.5 * h
            x_2 = (s.neg().exp() / t.neg().exp()) * (x + (denoised - u)) - (-h * 0.5).expm1() * denoised
            denoised_2 = run(x_2, s.neg().exp())
            # As in 0.3.64: the guidance term here reads the uncond captured by the midpoint call.
            x = (t_next.neg().exp() / t.neg().exp()) * (x + (denoised - uncond())) - (-h).expm1() * denoised_2
        if sigmas[i + 1] > 0:
            x = x + noise_sampler(sigmas[i], sigmas[i + 1]) * s_noise * sigma_up
    return x
