"""SDE samplers driven by Brownian-tree noise: dpmpp_sde, dpmpp_2m_sde (midpoint / heun),
dpmpp_3m_sde, and ComfyUI's `_gpu` variants (same maths, tree on x's device).

The noise is `BrownianTreeNoiseSampler(x, min positive sigma, max sigma, seed)` built from
torchsde, as ComfyUI does, so a seed gives ComfyUI's noise. Written in the half-log-SNR
lambda = -log(sigma) (alpha = 1 for eps/v models), following ComfyUI's `comfy/k_diffusion/sampling.py`.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from comfy_core.sampling.noise import BrownianTreeNoiseSampler, NoiseSampler
from comfy_core.sampling.samplers.common import (Denoiser, StepCallback, StepDenoiser, get_ancestral_step,
                                                 half_log_snr)
from comfy_core.sampling.samplers.exponential import ExponentialStep, sde_first_order, sde_noise


def _tree_noise(x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict, noise_sampler: NoiseSampler | None,
                cpu: bool) -> NoiseSampler:
    if noise_sampler is not None:
        return noise_sampler
    sigma_min, sigma_max = sigmas[sigmas > 0].min(), sigmas.max()
    return BrownianTreeNoiseSampler(x, sigma_min, sigma_max, seed=extra_args.get("seed"), cpu=cpu)


@torch.no_grad()
def sample_dpmpp_sde(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                     callback: StepCallback = None, disable: Any = None, eta: float = 1.0, s_noise: float = 1.0,
                     noise_sampler: NoiseSampler | None = None, r: float = 1 / 2, *, _cpu_tree: bool = True) -> torch.Tensor:
    """DPM-Solver++ stochastic, second-order single-step (Lu et al. 2022, arXiv 2211.01095, with the
    SDE noise of k-diffusion's `sample_dpmpp_sde`): an intermediate point at lambda_s + r h."""
    if len(sigmas) <= 1:
        return x
    run = StepDenoiser(model, x, extra_args, callback)
    noise_sampler = _tree_noise(x, sigmas, run.extra_args, noise_sampler, _cpu_tree)
    for i in range(len(sigmas) - 1):
        denoised = run.step(x, sigmas, i)
        if sigmas[i + 1] == 0:
            x = denoised
            continue
        lambda_s, lambda_t = half_log_snr(sigmas[i]), half_log_snr(sigmas[i + 1])
        h = lambda_t - lambda_s
        lambda_s_1 = lambda_s + r * h
        fac = 1 / (2 * r)
        sigma_s_1 = lambda_s_1.neg().exp()
        alpha_s = sigmas[i] * lambda_s.exp()
        alpha_s_1 = sigma_s_1 * lambda_s_1.exp()
        alpha_t = sigmas[i + 1] * lambda_t.exp()

        # Step 1: to the intermediate point.
        sd, su = get_ancestral_step(lambda_s.neg().exp(), lambda_s_1.neg().exp(), eta)
        h_ = sd.log().neg() - lambda_s
        x_2 = (alpha_s_1 / alpha_s) * (-h_).exp() * x - alpha_s_1 * (-h_).expm1() * denoised
        if eta > 0 and s_noise > 0:
            x_2 = x_2 + alpha_s_1 * noise_sampler(sigmas[i], sigma_s_1) * s_noise * su
        denoised_2 = run(x_2, sigma_s_1)

        # Step 2: to sigma_{i+1} with the blended x0 estimate.
        sd, su = get_ancestral_step(lambda_s.neg().exp(), lambda_t.neg().exp(), eta)
        h_ = sd.log().neg() - lambda_s
        denoised_d = (1 - fac) * denoised + fac * denoised_2
        x = (alpha_t / alpha_s) * (-h_).exp() * x - alpha_t * (-h_).expm1() * denoised_d
        if eta > 0 and s_noise > 0:
            x = x + alpha_t * noise_sampler(sigmas[i], sigmas[i + 1]) * s_noise * su
    return x


Correction = Callable[[ExponentialStep, torch.Tensor, torch.Tensor, list[torch.Tensor], list[torch.Tensor]],
                     torch.Tensor]


def _multistep_sde(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None,
                   callback: StepCallback, eta: float, s_noise: float, noise_sampler: NoiseSampler | None,
                   cpu_tree: bool, correct: Correction) -> torch.Tensor:
    """The DPM-Solver++(kM) SDE loop (Lu et al. 2022, arXiv 2211.01095; k-diffusion): per step the
    first-order SDE step (`exponential.sde_first_order`), then `correct(step, x, denoised,
    previous_denoised, previous_h) -> x` (the multistep correction from the earlier x0 predictions
    and step sizes, newest first), then the Brownian-tree noise. The step to sigma 0 denoises."""
    if len(sigmas) <= 1:
        return x
    run = StepDenoiser(model, x, extra_args, callback)
    noise_sampler = _tree_noise(x, sigmas, run.extra_args, noise_sampler, cpu_tree)
    previous_denoised: list[torch.Tensor] = []
    previous_h: list[torch.Tensor] = []
    h = None
    for i in range(len(sigmas) - 1):
        denoised = run.step(x, sigmas, i)
        if sigmas[i + 1] == 0:
            x = denoised
        else:
            step = ExponentialStep.between(sigmas[i], sigmas[i + 1], eta)
            h = step.h
            x = correct(step, sde_first_order(step, x, denoised), denoised, previous_denoised, previous_h)
            if eta > 0 and s_noise > 0:
                x = x + sde_noise(step, noise_sampler(sigmas[i], sigmas[i + 1]), s_noise)
        previous_denoised = [denoised] + previous_denoised[:1]
        previous_h = [h] + previous_h[:1]
    return x


def _correct_2m(solver_type: str) -> Correction:
    """DPM-Solver++(2M) SDE's second-order correction, "midpoint" or "heun"."""

    def correct(step: ExponentialStep, x: torch.Tensor, denoised: torch.Tensor,
                previous_denoised: list[torch.Tensor], previous_h: list[torch.Tensor]) -> torch.Tensor:
        if not previous_denoised:
            return x
        h_eta, alpha_t = step.h_eta, step.alpha_next
        r = previous_h[0] / step.h
        if solver_type == "heun":
            return x + alpha_t * ((-h_eta).expm1().neg() / (-h_eta) + 1) * (1 / r) * (denoised - previous_denoised[0])
        return x + 0.5 * alpha_t * (-h_eta).expm1().neg() * (1 / r) * (denoised - previous_denoised[0])

    return correct


def _correct_3m(step: ExponentialStep, x: torch.Tensor, denoised: torch.Tensor,
                previous_denoised: list[torch.Tensor], previous_h: list[torch.Tensor]) -> torch.Tensor:
    """DPM-Solver++(3M) SDE's correction: third order from two earlier steps, second from one."""
    h, h_eta, alpha_t = step.h, step.h_eta, step.alpha_next
    if len(previous_denoised) == 2:
        (denoised_1, denoised_2), (h_1, h_2) = previous_denoised, previous_h
        r0, r1 = h_1 / h, h_2 / h
        d1_0 = (denoised - denoised_1) / r0
        d1_1 = (denoised_1 - denoised_2) / r1
        d1 = d1_0 + (d1_0 - d1_1) * r0 / (r0 + r1)
        d2 = (d1_0 - d1_1) / (r0 + r1)
        phi_2 = h_eta.neg().expm1() / h_eta + 1
        phi_3 = phi_2 / h_eta - 0.5
        return x + (alpha_t * phi_2) * d1 - (alpha_t * phi_3) * d2
    if previous_denoised:
        d = (denoised - previous_denoised[0]) / (previous_h[0] / h)
        phi_2 = h_eta.neg().expm1() / h_eta + 1
        return x + (alpha_t * phi_2) * d
    return x


@torch.no_grad()
def sample_dpmpp_2m_sde(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                        callback: StepCallback = None, disable: Any = None, eta: float = 1.0, s_noise: float = 1.0,
                        noise_sampler: NoiseSampler | None = None, solver_type: str = "midpoint",
                        *, _cpu_tree: bool = True) -> torch.Tensor:
    """DPM-Solver++(2M) SDE (Lu et al. 2022, arXiv 2211.01095, section 5 / Appendix; k-diffusion).

    `solver_type` "midpoint" or "heun" picks the second-order correction.
    """
    if len(sigmas) <= 1:
        return x
    if solver_type not in ("heun", "midpoint"):
        raise ValueError(f"sample_dpmpp_2m_sde: solver_type must be 'heun' or 'midpoint', got {solver_type!r}")
    return _multistep_sde(model, x, sigmas, extra_args, callback, eta, s_noise, noise_sampler, _cpu_tree,
                          _correct_2m(solver_type))


@torch.no_grad()
def sample_dpmpp_2m_sde_heun(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                             callback: StepCallback = None, disable: Any = None, eta: float = 1.0, s_noise: float = 1.0,
                             noise_sampler: NoiseSampler | None = None, solver_type: str = "heun") -> torch.Tensor:
    """DPM-Solver++(2M) SDE with the Heun correction (see `sample_dpmpp_2m_sde`)."""
    return sample_dpmpp_2m_sde(model, x, sigmas, extra_args, callback, disable, eta, s_noise, noise_sampler, solver_type)


@torch.no_grad()
def sample_dpmpp_3m_sde(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                        callback: StepCallback = None, disable: Any = None, eta: float = 1.0, s_noise: float = 1.0,
                        noise_sampler: NoiseSampler | None = None, *, _cpu_tree: bool = True) -> torch.Tensor:
    """DPM-Solver++(3M) SDE: third-order multistep with the SDE noise term (k-diffusion, after
    Lu et al. 2022, arXiv 2211.01095)."""
    return _multistep_sde(model, x, sigmas, extra_args, callback, eta, s_noise, noise_sampler, _cpu_tree, _correct_3m)


def _on_device(fn: Any, name: str, doc: str) -> Any:
    """ComfyUI's `_gpu` variant: the Brownian tree lives on x's device instead of the CPU."""

    @torch.no_grad()
    def sampler(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                callback: StepCallback = None, disable: Any = None, **options: Any) -> torch.Tensor:
        return fn(model, x, sigmas, extra_args, callback, disable, _cpu_tree=False, **options)

    sampler.__name__ = sampler.__qualname__ = name
    sampler.__doc__ = doc
    return sampler


sample_dpmpp_sde_gpu = _on_device(sample_dpmpp_sde, "sample_dpmpp_sde_gpu",
                                  "`sample_dpmpp_sde` with the Brownian tree on x's device.")
sample_dpmpp_2m_sde_gpu = _on_device(sample_dpmpp_2m_sde, "sample_dpmpp_2m_sde_gpu",
                                     "`sample_dpmpp_2m_sde` with the Brownian tree on x's device.")
sample_dpmpp_3m_sde_gpu = _on_device(sample_dpmpp_3m_sde, "sample_dpmpp_3m_sde_gpu",
                                     "`sample_dpmpp_3m_sde` with the Brownian tree on x's device.")


@torch.no_grad()
def sample_dpmpp_2m_sde_heun_gpu(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                                 callback: StepCallback = None, disable: Any = None, eta: float = 1.0,
                                 s_noise: float = 1.0, noise_sampler: NoiseSampler | None = None,
                                 solver_type: str = "heun") -> torch.Tensor:
    """`sample_dpmpp_2m_sde_heun` with the Brownian tree on x's device."""
    return sample_dpmpp_2m_sde(model, x, sigmas, extra_args, callback, disable, eta, s_noise, noise_sampler,
                               solver_type, _cpu_tree=False)
