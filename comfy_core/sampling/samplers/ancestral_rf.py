"""The rectified-flow ("RF") forms of the ancestral samplers, which ComfyUI's euler_ancestral,
dpm_2_ancestral and dpmpp_2s_ancestral switch to when the model's sampling is a flow one
(ComfyUI's `CONST`: x_sigma = (1 - sigma) * x0 + sigma * noise, e.g. after ModelSamplingSD3).

A flow step cannot add noise on top of a VE step: the signal is scaled by alpha = 1 - sigma too.
Each step goes down to `sigma_down = sigma_next * (1 + (sigma_next / sigma - 1) * eta)`, rescales
by alpha_next / alpha_down and adds fresh noise of std
`sqrt(sigma_next^2 - sigma_down^2 * alpha_next^2 / alpha_down^2)`, so the marginal at sigma_next
is the flow's (behaviour and step formulas as ComfyUI's comfy/k_diffusion/sampling.py `*_RF`).
"""
from __future__ import annotations

import torch

from comfy_core.sampling.noise import NoiseSampler
from comfy_core.sampling.samplers.common import Denoiser, StepCallback, StepDenoiser, seeded_noise_sampler, to_d


def is_flow_model(model: Denoiser) -> bool:
    """Whether the denoiser's model sampling is rectified flow (ComfyUI's `CONST` class), which
    ComfyUI reads as `model.inner_model.inner_model.model_sampling`."""
    return getattr(getattr(model, "model_sampling", None), "prediction", None) == "const"


def _flow_down_step(sigma: torch.Tensor, sigma_next: torch.Tensor, eta: float
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(sigma_down, alpha_next / alpha_down, renoise std) of one flow ancestral step."""
    sigma_down = sigma_next * (1 + (sigma_next / sigma - 1) * eta)
    alpha_next, alpha_down = 1 - sigma_next, 1 - sigma_down
    renoise = (sigma_next ** 2 - sigma_down ** 2 * alpha_next ** 2 / alpha_down ** 2) ** 0.5
    return sigma_down, alpha_next / alpha_down, renoise


@torch.no_grad()
def sample_euler_ancestral_RF(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor,  # noqa: N802 (ComfyUI's name)
                              extra_args: dict | None = None, callback: StepCallback = None, disable=None,
                              eta: float = 1.0, s_noise: float = 1.0,
                              noise_sampler: NoiseSampler | None = None) -> torch.Tensor:
    """Euler to sigma_down along the flow's straight line (x and x0 interpolated), then renoise."""
    run = StepDenoiser(model, x, extra_args, callback)
    noise_sampler = seeded_noise_sampler(x, run.extra_args, noise_sampler)
    for i in range(len(sigmas) - 1):
        denoised = run.step(x, sigmas, i)
        if sigmas[i + 1] == 0:
            x = denoised
            continue
        sigma_down, rescale, renoise = _flow_down_step(sigmas[i], sigmas[i + 1], eta)
        ratio = sigma_down / sigmas[i]
        x = ratio * x + (1 - ratio) * denoised
        if eta > 0:
            x = rescale * x + noise_sampler(sigmas[i], sigmas[i + 1]) * s_noise * renoise
    return x


@torch.no_grad()
def sample_dpm_2_ancestral_RF(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor,  # noqa: N802
                              extra_args: dict | None = None, callback: StepCallback = None, disable=None,
                              eta: float = 1.0, s_noise: float = 1.0,
                              noise_sampler: NoiseSampler | None = None) -> torch.Tensor:
    """DPM-Solver-2 (geometric midpoint) to sigma_down, then the flow renoise."""
    run = StepDenoiser(model, x, extra_args, callback)
    noise_sampler = seeded_noise_sampler(x, run.extra_args, noise_sampler)
    for i in range(len(sigmas) - 1):
        denoised = run.step(x, sigmas, i)
        sigma_down, rescale, renoise = _flow_down_step(sigmas[i], sigmas[i + 1], eta)
        d = to_d(x, sigmas[i], denoised)
        if sigma_down == 0:
            x = x + d * (sigma_down - sigmas[i])
            continue
        sigma_mid = sigmas[i].log().lerp(sigma_down.log(), 0.5).exp()
        x_2 = x + d * (sigma_mid - sigmas[i])
        d_2 = to_d(x_2, sigma_mid, run(x_2, sigma_mid))
        x = x + d_2 * (sigma_down - sigmas[i])
        x = rescale * x + noise_sampler(sigmas[i], sigmas[i + 1]) * s_noise * renoise
    return x


def _flow_lambda(sigma: torch.Tensor) -> torch.Tensor:
    """log(alpha / sigma) of the flow, alpha = 1 - sigma."""
    return ((1 - sigma) / sigma).log()


@torch.no_grad()
def sample_dpmpp_2s_ancestral_RF(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor,  # noqa: N802
                                 extra_args: dict | None = None, callback: StepCallback = None, disable=None,
                                 eta: float = 1.0, s_noise: float = 1.0,
                                 noise_sampler: NoiseSampler | None = None) -> torch.Tensor:
    """DPM-Solver++(2S) in the flow's log-SNR (midpoint in lambda), to sigma_down, then renoise.
    A first sigma of exactly 1 (no log-SNR) takes its midpoint at 0.9999, as ComfyUI."""
    run = StepDenoiser(model, x, extra_args, callback)
    noise_sampler = seeded_noise_sampler(x, run.extra_args, noise_sampler)
    for i in range(len(sigmas) - 1):
        denoised = run.step(x, sigmas, i)
        sigma_down, rescale, renoise = _flow_down_step(sigmas[i], sigmas[i + 1], eta)
        if sigmas[i + 1] == 0:
            x = x + to_d(x, sigmas[i], denoised) * (sigma_down - sigmas[i])
        else:
            if sigmas[i] == 1.0:
                sigma_s = torch.as_tensor(0.9999, dtype=sigmas.dtype, device=sigmas.device)
            else:
                t_i, t_down = _flow_lambda(sigmas[i]), _flow_lambda(sigma_down)
                sigma_s = ((t_i + 0.5 * (t_down - t_i)).exp() + 1) ** -1
            ratio_s = sigma_s / sigmas[i]
            u = ratio_s * x + (1 - ratio_s) * denoised
            denoised_2 = run(u, sigma_s)
            ratio_down = sigma_down / sigmas[i]
            x = ratio_down * x + (1 - ratio_down) * denoised_2
        if sigmas[i + 1] > 0 and eta > 0:
            x = rescale * x + noise_sampler(sigmas[i], sigmas[i + 1]) * s_noise * renoise
    return x
