"""The rectified-flow forms of the ancestral samplers (comfy_core/sampling/samplers/ancestral_rf.py):
chosen by the ancestral samplers on a flow model sampling, as ComfyUI's; each step lands on the
flow's marginal at sigma_next, checked on a denoiser that knows x0 exactly."""
from __future__ import annotations

import pytest
import torch

from comfy_core.models.model_sampling import FlowModelSampling, ModelSampling
from comfy_core.sampling.samplers import ancestral, ancestral_rf


class ExactDenoiser:
    """D(x, sigma) = x0 for every input: the ideal denoiser of a one-point data set."""

    def __init__(self, x0: torch.Tensor, model_sampling) -> None:
        self.x0, self.model_sampling, self.calls = x0, model_sampling, 0

    def __call__(self, x, sigma, **kwargs):
        self.calls += 1
        return self.x0.expand_as(x).clone()


def _setup(flow: bool = True):
    g = torch.Generator().manual_seed(0)
    x0, n = torch.randn(1, 4, 3, 3, generator=g), torch.randn(1, 4, 3, 3, generator=g)
    return x0, n, ExactDenoiser(x0, FlowModelSampling(3.0) if flow else ModelSampling())


SIGMAS = torch.tensor([1.0, 0.8, 0.5, 0.2, 0.0])
RF = {"euler_ancestral": "sample_euler_ancestral_RF", "dpm_2_ancestral": "sample_dpm_2_ancestral_RF",
      "dpmpp_2s_ancestral": "sample_dpmpp_2s_ancestral_RF"}


@pytest.mark.parametrize("name", sorted(RF))
def test_ancestral_samplers_take_the_flow_form_on_a_flow_model(name) -> None:
    x0, n, model = _setup()
    x = (1 - SIGMAS[1]) * x0 + SIGMAS[1] * n
    sigmas = torch.tensor([0.8, 0.5, 0.2])  # not down to 0, where every form returns x0
    ours = getattr(ancestral, f"sample_{name}")(model, x, sigmas, extra_args={"seed": 3})
    rf = getattr(ancestral_rf, RF[name])(model, x, sigmas, extra_args={"seed": 3})
    assert torch.equal(ours, rf)
    _x0, _n, ve_model = _setup(flow=False)
    ve = getattr(ancestral, f"sample_{name}")(ve_model, x, sigmas, extra_args={"seed": 3})
    assert not torch.allclose(ve, rf)  # the VE form is another sampler


@pytest.mark.parametrize("name", sorted(RF))
def test_eta_zero_follows_the_flow_exactly(name) -> None:
    # With D = x0 the flow ODE's solution is x_sigma = (1 - sigma) x0 + sigma n: every form lands on it.
    x0, n, model = _setup()
    sigmas = torch.tensor([0.9, 0.6, 0.3])
    x = (1 - sigmas[0]) * x0 + sigmas[0] * n

    # (dpm_2's flow form draws its noise even at eta 0, as ComfyUI's, with a coefficient of 0)
    out = getattr(ancestral_rf, RF[name])(model, x, sigmas, eta=0.0, noise_sampler=lambda *_: torch.full_like(x, 1e3))
    assert torch.allclose(out, (1 - sigmas[-1]) * x0 + sigmas[-1] * n, atol=1e-5)


@pytest.mark.parametrize("name", sorted(RF))
def test_an_ancestral_step_keeps_the_flow_marginal(name) -> None:
    # One step from sigma to sigma_next: the x0 part is (1 - sigma_next) x0, and the old and fresh
    # noise parts add up to std sigma_next (their coefficients' squares sum to sigma_next^2).
    x0, n, model = _setup()
    s, s_next, eta = torch.tensor(0.8), torch.tensor(0.5), 1.0
    m = torch.randn(1, 4, 3, 3, generator=torch.Generator().manual_seed(9))
    x = (1 - s) * x0 + s * n
    out = getattr(ancestral_rf, RF[name])(model, x, torch.stack([s, s_next]), eta=eta,
                                          noise_sampler=lambda *_: m)
    sigma_down = s_next * (1 + (s_next / s - 1) * eta)
    old = (1 - s_next) / (1 - sigma_down) * sigma_down
    fresh = (s_next ** 2 - old ** 2) ** 0.5
    assert torch.allclose(out, (1 - s_next) * x0 + old * n + fresh * m, atol=1e-5)
