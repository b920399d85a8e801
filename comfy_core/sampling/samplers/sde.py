"""SDE samplers driven by Brownian-tree noise: dpmpp_sde, dpmpp_2m_sde (midpoint / heun),
dpmpp_3m_sde, and ComfyUI's `_gpu` variants (same maths, tree on x's device).

The noise is `BrownianTreeNoiseSampler(x, min positive sigma, max sigma, seed)` built from
torchsde, as ComfyUI does, so a seed gives ComfyUI's noise. Written in the half-log-SNR
lambda = -log(sigma) (alpha = 1 for eps/v models), following ComfyUI's `comfy/k_diffusion/sampling.py`.
"""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.sampling.noise import BrownianTreeNoiseSampler, NoiseSampler
from comfy_core.sampling.samplers.common import Denoiser, StepCallback, get_ancestral_step, report


def _tree_noise(x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict, noise_sampler: NoiseSampler | None,
                cpu: bool) -> NoiseSampler:
    if noise_sampler is not None:
        return noise_sampler
    sigma_min, sigma_max = sigmas[sigmas > 0].min(), sigmas.max()
    return BrownianTreeNoiseSampler(x, sigma_min, sigma_max, seed=extra_args.get("seed"), cpu=cpu)


def _lambda(sigma: torch.Tensor) -> torch.Tensor:
    """Half-log-SNR log(alpha/sigma) of a VE sigma (alpha = 1)."""
    return sigma.log().neg()


@torch.no_grad()
def sample_dpmpp_sde(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                     callback: StepCallback = None, disable: Any = None, eta: float = 1.0, s_noise: float = 1.0,
                     noise_sampler: NoiseSampler | None = None, r: float = 1 / 2, *, _cpu_tree: bool = True) -> torch.Tensor:
    """DPM-Solver++ stochastic, second-order single-step (Lu et al. 2022, arXiv 2211.01095, with the
    SDE noise of k-diffusion's `sample_dpmpp_sde`): an intermediate point at lambda_s + r h."""
    if len(sigmas) <= 1:
        return x
    extra_args = {} if extra_args is None else extra_args
    noise_sampler = _tree_noise(x, sigmas, extra_args, noise_sampler, _cpu_tree)
    s_in = x.new_ones([x.shape[0]])
    for i in range(len(sigmas) - 1):
        denoised = model(x, sigmas[i] * s_in, **extra_args)
        report(callback, x, i, sigmas[i], sigmas[i], denoised)
        if sigmas[i + 1] == 0:
            x = denoised
            continue
        lambda_s, lambda_t = _lambda(sigmas[i]), _lambda(sigmas[i + 1])
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
        denoised_2 = model(x_2, sigma_s_1 * s_in, **extra_args)

        # Step 2: to sigma_{i+1} with the blended x0 estimate.
        sd, su = get_ancestral_step(lambda_s.neg().exp(), lambda_t.neg().exp(), eta)
        h_ = sd.log().neg() - lambda_s
        denoised_d = (1 - fac) * denoised + fac * denoised_2
        x = (alpha_t / alpha_s) * (-h_).exp() * x - alpha_t * (-h_).expm1() * denoised_d
        if eta > 0 and s_noise > 0:
            x = x + alpha_t * noise_sampler(sigmas[i], sigmas[i + 1]) * s_noise * su
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
    extra_args = {} if extra_args is None else extra_args
    noise_sampler = _tree_noise(x, sigmas, extra_args, noise_sampler, _cpu_tree)
    s_in = x.new_ones([x.shape[0]])
    old_denoised = None
    h = h_last = None
    for i in range(len(sigmas) - 1):
        denoised = model(x, sigmas[i] * s_in, **extra_args)
        report(callback, x, i, sigmas[i], sigmas[i], denoised)
        if sigmas[i + 1] == 0:
            x = denoised
        else:
            lambda_s, lambda_t = _lambda(sigmas[i]), _lambda(sigmas[i + 1])
            h = lambda_t - lambda_s
            h_eta = h * (eta + 1)
            alpha_t = sigmas[i + 1] * lambda_t.exp()
            x = sigmas[i + 1] / sigmas[i] * (-h * eta).exp() * x + alpha_t * (-h_eta).expm1().neg() * denoised
            if old_denoised is not None:
                r = h_last / h
                if solver_type == "heun":
                    x = x + alpha_t * ((-h_eta).expm1().neg() / (-h_eta) + 1) * (1 / r) * (denoised - old_denoised)
                else:
                    x = x + 0.5 * alpha_t * (-h_eta).expm1().neg() * (1 / r) * (denoised - old_denoised)
            if eta > 0 and s_noise > 0:
                x = x + noise_sampler(sigmas[i], sigmas[i + 1]) * sigmas[i + 1] * (-2 * h * eta).expm1().neg().sqrt() * s_noise
        old_denoised = denoised
        h_last = h
    return x


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
    if len(sigmas) <= 1:
        return x
    extra_args = {} if extra_args is None else extra_args
    noise_sampler = _tree_noise(x, sigmas, extra_args, noise_sampler, _cpu_tree)
    s_in = x.new_ones([x.shape[0]])
    denoised_1 = denoised_2 = None
    h = h_1 = h_2 = None
    for i in range(len(sigmas) - 1):
        denoised = model(x, sigmas[i] * s_in, **extra_args)
        report(callback, x, i, sigmas[i], sigmas[i], denoised)
        if sigmas[i + 1] == 0:
            x = denoised
        else:
            lambda_s, lambda_t = _lambda(sigmas[i]), _lambda(sigmas[i + 1])
            h = lambda_t - lambda_s
            h_eta = h * (eta + 1)
            alpha_t = sigmas[i + 1] * lambda_t.exp()
            x = sigmas[i + 1] / sigmas[i] * (-h * eta).exp() * x + alpha_t * (-h_eta).expm1().neg() * denoised
            if h_2 is not None:
                r0, r1 = h_1 / h, h_2 / h
                d1_0 = (denoised - denoised_1) / r0
                d1_1 = (denoised_1 - denoised_2) / r1
                d1 = d1_0 + (d1_0 - d1_1) * r0 / (r0 + r1)
                d2 = (d1_0 - d1_1) / (r0 + r1)
                phi_2 = h_eta.neg().expm1() / h_eta + 1
                phi_3 = phi_2 / h_eta - 0.5
                x = x + (alpha_t * phi_2) * d1 - (alpha_t * phi_3) * d2
            elif h_1 is not None:
                d = (denoised - denoised_1) / (h_1 / h)
                phi_2 = h_eta.neg().expm1() / h_eta + 1
                x = x + (alpha_t * phi_2) * d
            if eta > 0 and s_noise > 0:
                x = x + noise_sampler(sigmas[i], sigmas[i + 1]) * sigmas[i + 1] * (-2 * h * eta).expm1().neg().sqrt() * s_noise
        denoised_1, denoised_2 = denoised, denoised_1
        h_1, h_2 = h, h_1
    return x


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
