"""The first-order SDE exponential-integrator step shared by the 2M/3M SDE and SEEDS samplers."""
from __future__ import annotations

import math

import torch

from comfy_core.sampling.samplers.exponential import ExponentialStep, sde_decay, sde_first_order, sde_noise


def test_with_eta_zero_the_step_is_the_dpm_solver_pp_ode_step() -> None:
    sigma, sigma_next = torch.tensor(3.0, dtype=torch.float64), torch.tensor(1.2, dtype=torch.float64)
    step = ExponentialStep.between(sigma, sigma_next, 0.0)
    x, denoised = torch.full((2,), 4.0, dtype=torch.float64), torch.full((2,), 0.5, dtype=torch.float64)
    # DPM-Solver-1 in data prediction: x_t = (sigma_t / sigma_s) x + (1 - sigma_t / sigma_s) D
    ratio = 1.2 / 3.0
    torch.testing.assert_close(sde_first_order(step, x, denoised), ratio * x + (1 - ratio) * denoised)
    assert abs(float(step.h) - math.log(3.0 / 1.2)) < 1e-12
    assert torch.equal(sde_noise(step, torch.ones(2, dtype=torch.float64), 1.0), torch.zeros(2, dtype=torch.float64))


def test_noise_and_decay_keep_the_marginal_variance_sigma_next_squared() -> None:
    # With D = 0, x ~ N(0, sigma^2): decay^2 sigma^2 + noise_std^2 = sigma_next^2 for any eta.
    sigma, sigma_next = torch.tensor(2.0, dtype=torch.float64), torch.tensor(0.8, dtype=torch.float64)
    for eta in (0.3, 1.0):
        step = ExponentialStep.between(sigma, sigma_next, eta)
        decay = float(sde_decay(step, torch.ones((), dtype=torch.float64)))
        noise_std = float(sde_noise(step, torch.ones((), dtype=torch.float64), 1.0))
        assert abs(decay ** 2 * 4.0 + noise_std ** 2 - 0.64) < 1e-12
        assert float(step.h_eta) == float(step.h) * (1 + eta)
