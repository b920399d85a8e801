"""Cross-checks against an independent implementation: diffusers' schedulers (test-only oracle),
driven with our sigmas on the toy Gaussian denoiser.

diffusers works on eps predictions (and, for DPM-Solver, in VP scale x/sqrt(1+sigma^2)); we feed it
eps = (x - D(x, sigma))/sigma from the same ideal denoiser and compare final samples.
"""
from __future__ import annotations

import pytest
import torch

from comfy_core.models.model_sampling import ModelSampling
from comfy_core.sampling.samplers.registry import sampler_function
from comfy_core.sampling.schedulers import calculate_sigmas

diffusers = pytest.importorskip("diffusers")

MU, S = 0.3, 0.5
KW = dict(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear")


def denoise(x: torch.Tensor, sigma: torch.Tensor, **_: object) -> torch.Tensor:
    sg = sigma.reshape(-1, *([1] * (x.ndim - 1))).to(x.dtype)
    return (S * S * x + sg * sg * MU) / (S * S + sg * sg)


def eps_of(x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    return (x - denoise(x, sigma.reshape(1))) / sigma


def setup(scheduler_name: str = "karras", steps: int = 10):
    ms = ModelSampling()
    sigmas = calculate_sigmas(ms, scheduler_name, steps).double()
    x = torch.randn(1, 4, 4, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * sigmas[0]
    return ms, sigmas, x


@pytest.mark.parametrize("scheduler_name", ["karras", "normal", "exponential"])
def test_dpmpp_2m_matches_diffusers_dpm_solver_plus_plus(scheduler_name: str) -> None:
    ms, sigmas, x = setup(scheduler_name)
    ours = sampler_function("dpmpp_2m")(denoise, x.clone(), sigmas.clone())
    sch = diffusers.DPMSolverMultistepScheduler(**KW, algorithm_type="dpmsolver++", solver_order=2,
                                                final_sigmas_type="zero")
    sch.set_timesteps(len(sigmas) - 1)
    sch.sigmas = sigmas.clone()
    sch.timesteps = ms.timestep(sigmas[:-1].float())
    x_vp = x / (1 + sigmas[0] ** 2) ** 0.5
    for i, t in enumerate(sch.timesteps):
        s = sigmas[i]
        x_vp = sch.step(eps_of(x_vp * (1 + s * s) ** 0.5, s), t, x_vp).prev_sample
    torch.testing.assert_close(ours, x_vp, rtol=0, atol=1e-6)


def test_euler_matches_diffusers_euler_discrete() -> None:
    ms, sigmas, x = setup()
    ours = sampler_function("euler")(denoise, x.clone(), sigmas.clone())
    sch = diffusers.EulerDiscreteScheduler(**KW)
    sch.set_timesteps(len(sigmas) - 1)
    sch.sigmas = sigmas.clone()
    sch.set_begin_index(0)
    sch.is_scale_input_called = True  # we scale ourselves (VE samples)
    y = x.clone()
    for i, t in enumerate(sch.timesteps):
        y = sch.step(eps_of(y, sigmas[i]), t, y).prev_sample
    torch.testing.assert_close(ours, y, rtol=0, atol=1e-6)  # diffusers steps in float32


def test_lms_matches_diffusers_lms_before_comfyuis_final_denoise_step() -> None:
    ms, sigmas, x = setup(steps=12)
    window = sigmas[:-1]  # end at sigma_min: ComfyUI's "x = denoised" last step does not apply
    ours = sampler_function("lms")(denoise, x.clone(), window.clone())
    sch = diffusers.LMSDiscreteScheduler(**KW)
    sch.set_timesteps(len(window))
    sch.sigmas = torch.cat([window, window.new_zeros(1)]).float()  # diffusers indexes one past the end
    sch.set_begin_index(0)
    y = x.clone()
    for i in range(len(window) - 1):
        y = sch.step(eps_of(y, window[i]), sch.timesteps[i], y, order=4).prev_sample
    torch.testing.assert_close(ours, y, rtol=0, atol=1e-4)  # both integrate with quad(epsrel=1e-4)
