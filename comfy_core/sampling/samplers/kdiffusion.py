"""The k-diffusion namespace: every sampler function by its k-diffusion / ComfyUI name, plus the
helpers samplers written against k-diffusion use.

ComfyUI keeps its samplers in `comfy/k_diffusion/sampling.py` and finds the function of a
sampler name as `getattr(that module, "sample_" + name)`; node packs add samplers by assigning
`sample_<name>` there and wrap ours by replacing them. This module is that namespace for our
runtime: `registry.sampler_function(name)` reads `sample_<name>` from here on every lookup, and
the surface module `comfy.k_diffusion.sampling` (compat) forwards a pack's assignments here.
The functions themselves live in the topic modules beside this one (written here after
k-diffusion, Crowson, MIT, and ComfyUI's additions); this module only names them.
"""
from __future__ import annotations

import math  # noqa: F401  (k-diffusion's module names: packs read `sampling.math` / `sampling.torch`)

import torch  # noqa: F401
from tqdm.auto import tqdm, trange  # noqa: F401

from comfy_core.sampling.noise import BatchedBrownianTree, BrownianTreeNoiseSampler  # noqa: F401
from comfy_core.sampling.noise import default_noise_sampler  # noqa: F401  (home: comfy_core.sampling.noise)
from comfy_core.sampling.ar_video import sample_ar_video  # noqa: F401  (SamplerARVideo's ksampler("ar_video"))
from comfy_core.sampling.samplers.ancestral import (sample_ddpm, sample_dpm_2_ancestral,  # noqa: F401
                                                    sample_dpmpp_2s_ancestral, sample_euler_ancestral, sample_lcm)
from comfy_core.sampling.samplers.ancestral_rf import (sample_dpm_2_ancestral_RF,  # noqa: F401
                                                       sample_dpmpp_2s_ancestral_RF, sample_euler_ancestral_RF)
from comfy_core.sampling.samplers.common import append_dims, get_ancestral_step, to_d  # noqa: F401
from comfy_core.sampling.samplers.deis import sample_deis  # noqa: F401
from comfy_core.sampling.samplers.deterministic import (linear_multistep_coeff, sample_dpm_2,  # noqa: F401
                                                        sample_dpmpp_2m, sample_euler, sample_heun, sample_heunpp2,
                                                        sample_ipndm, sample_ipndm_v, sample_lms)
from comfy_core.sampling.samplers.dpm_solver import (DPMSolver, PIDStepSizeController,  # noqa: F401
                                                     sample_dpm_adaptive, sample_dpm_fast)
from comfy_core.sampling.samplers.extra import (sample_dpmpp_2m_cfg_pp, sample_dpmpp_2s_ancestral_cfg_pp,  # noqa: F401
                                                sample_euler_ancestral_cfg_pp, sample_euler_cfg_pp,
                                                sample_gradient_estimation, sample_gradient_estimation_cfg_pp,
                                                sample_res_multistep, sample_res_multistep_ancestral,
                                                sample_res_multistep_ancestral_cfg_pp, sample_res_multistep_cfg_pp)
from comfy_core.sampling.samplers.sa_solver import sample_sa_solver, sample_sa_solver_pece  # noqa: F401
from comfy_core.sampling.samplers.sde import (sample_dpmpp_2m_sde, sample_dpmpp_2m_sde_gpu,  # noqa: F401
                                              sample_dpmpp_2m_sde_heun, sample_dpmpp_2m_sde_heun_gpu,
                                              sample_dpmpp_3m_sde, sample_dpmpp_3m_sde_gpu, sample_dpmpp_sde,
                                              sample_dpmpp_sde_gpu)
from comfy_core.sampling.samplers.stochastic_ei import (ei_h_phi_1, ei_h_phi_2, sample_er_sde,  # noqa: F401
                                                        sample_seeds_2, sample_seeds_3)
from comfy_core.sampling.schedulers import (get_sigmas_exponential, get_sigmas_karras,  # noqa: F401
                                            get_sigmas_polyexponential)
from comfy_core.sampling.sigma_schedules import get_sigmas_laplace, get_sigmas_vp  # noqa: F401


def append_zero(x: torch.Tensor) -> torch.Tensor:
    """`x` with a 0 appended (k-diffusion's `append_zero`)."""
    return torch.cat([x, x.new_zeros([1])])


def _is_flow(model_sampling: object) -> bool:
    """Whether `model_sampling` is a rectified-flow one (ComfyUI's `CONST` class)."""
    return getattr(model_sampling, "prediction", None) == "const"


def sigma_to_half_log_snr(sigma: torch.Tensor, model_sampling: object) -> torch.Tensor:
    """log(alpha / sigma): `-logit(sigma)` for flow models, `-log(sigma)` otherwise (ComfyUI)."""
    if _is_flow(model_sampling):
        return sigma.logit().neg()
    return sigma.log().neg()


def half_log_snr_to_sigma(half_log_snr: torch.Tensor, model_sampling: object) -> torch.Tensor:
    """The inverse of `sigma_to_half_log_snr`."""
    if _is_flow(model_sampling):
        return half_log_snr.neg().sigmoid()
    return half_log_snr.neg().exp()


def offset_first_sigma_for_snr(sigmas: torch.Tensor, model_sampling: object,
                               percent_offset: float = 1e-4) -> torch.Tensor:
    """For flow models a first sigma of 1 has no log-SNR: move it to `percent_to_sigma(offset)`."""
    if len(sigmas) <= 1 or not _is_flow(model_sampling) or sigmas[0] < 1:
        return sigmas
    sigmas = sigmas.clone()
    sigmas[0] = model_sampling.percent_to_sigma(percent_offset)  # type: ignore[attr-defined]
    return sigmas


def DDPMSampler_step(x: torch.Tensor, sigma: torch.Tensor, sigma_prev: torch.Tensor,  # noqa: N802 (ComfyUI's name)
                     noise: torch.Tensor, noise_sampler) -> torch.Tensor:
    """One DDPM posterior step in VP scale (Ho et al. 2020, Algorithm 2; ComfyUI's signature, with
    `noise` the eps prediction)."""
    from comfy_core.sampling.samplers.ancestral import _ddpm_step

    return _ddpm_step(x, sigma, sigma_prev, noise, noise_sampler)


@torch.no_grad()
def generic_step_sampler(model, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                         callback=None, disable=None, noise_sampler=None, step_function=None) -> torch.Tensor:
    """Run `step_function(x_vp, sigma, sigma_next, eps, noise_sampler) -> x_vp` per step in VP
    scale (ComfyUI's `generic_step_sampler`, which its ddpm is built on)."""
    from comfy_core.sampling.samplers.common import StepDenoiser, seeded_noise_sampler

    if step_function is None:
        raise TypeError("generic_step_sampler: step_function is required")
    run = StepDenoiser(model, x, extra_args, callback)
    noise_sampler = seeded_noise_sampler(x, run.extra_args, noise_sampler)
    for i in range(len(sigmas) - 1):
        denoised = run.step(x, sigmas, i)
        x = step_function(x / torch.sqrt(1.0 + sigmas[i] ** 2.0), sigmas[i], sigmas[i + 1],
                          (x - denoised) / sigmas[i], noise_sampler)
        if sigmas[i + 1] != 0:
            x = x * torch.sqrt(1.0 + sigmas[i + 1] ** 2.0)
    return x
