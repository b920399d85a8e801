"""Temporal Score Rescaling's maths (Xu et al. 2025, arXiv 2510.01184, eq. 6), checked against the
formulas evaluated by hand in float64."""
from __future__ import annotations

import math

import torch

from comfy_core.model_patches.temporal_score_rescaling import (TemporalScoreRescaling, sigma_to_half_log_snr,
                                                                 temporal_score_rescaling, tsr_rescaling_factor)
from comfy_core.models.model_sampling import FlowModelSampling, ModelSampling


def test_the_ratio_is_eq_6_and_tends_to_k_at_infinite_snr():
    snr = torch.tensor([0.0, 2.0, float("inf")], dtype=torch.float64)
    r = tsr_rescaling_factor(snr, 0.5, 1.0)
    assert r[0].item() == 1.0  # pure noise: no rescaling
    assert math.isclose(r[1].item(), (2 * 1 + 1) / (2 * 1 / 0.5 + 1))  # 3 / 5
    assert r[2].item() == 0.5


def test_half_log_snr_is_minus_log_sigma_or_minus_logit_for_flow():
    sigma = torch.tensor(0.25)
    assert math.isclose(sigma_to_half_log_snr(sigma, ModelSampling()).item(), math.log(4), rel_tol=1e-6)
    assert math.isclose(sigma_to_half_log_snr(sigma, FlowModelSampling()).item(), math.log(3), rel_tol=1e-6)


def _reference(denoised, x, sigma, k, tsr_sigma, flow):
    lam = -math.log(sigma / (1 - sigma)) if flow else -math.log(sigma)
    snr = math.exp(2 * lam)
    r = (snr * tsr_sigma ** 2 + 1) / (snr * tsr_sigma ** 2 / k + 1)
    alpha = sigma * math.exp(lam)  # 1 for VE sigmas, 1 - sigma for flow
    return x.double() / alpha + r * (denoised.double() - x.double() / alpha)


def test_the_prediction_is_rescaled_for_eps_and_flow_models():
    g = torch.Generator().manual_seed(0)
    x, denoised = torch.randn(2, 4, 3, 3, generator=g), torch.randn(2, 4, 3, 3, generator=g)
    for ms, sigma, flow in ((ModelSampling(), 2.0, False), (FlowModelSampling(), 0.25, True)):
        got = temporal_score_rescaling(denoised, x, torch.tensor(sigma), ms, 0.8, 1.5)
        want = _reference(denoised, x, sigma, 0.8, 1.5, flow)
        assert torch.allclose(got.double(), want, atol=1e-5), (ms, (got.double() - want).abs().max())
        assert not torch.allclose(got, denoised)


def test_nothing_changes_at_k_1_or_sigma_0():
    x, denoised = torch.ones(1, 4, 2, 2), torch.zeros(1, 4, 2, 2)
    assert temporal_score_rescaling(denoised, x, torch.tensor(3.0), ModelSampling(), 1.0, 1.0) is denoised
    assert temporal_score_rescaling(denoised, x, torch.tensor(0.0), ModelSampling(), 0.5, 1.0) is denoised


def test_the_hook_reads_the_first_sigma_and_the_running_model_sampling():
    from types import SimpleNamespace

    g = torch.Generator().manual_seed(1)
    x, denoised = torch.randn(2, 4, 2, 2, generator=g), torch.randn(2, 4, 2, 2, generator=g)
    hook = TemporalScoreRescaling(0.7, 1.0)
    args = {"denoised": denoised, "input": x, "sigma": torch.tensor([0.5, 0.9]),
            "model": SimpleNamespace(model_sampling=FlowModelSampling())}
    want = temporal_score_rescaling(denoised, x, torch.tensor(0.5), FlowModelSampling(), 0.7, 1.0)
    assert torch.equal(hook(args), want)
    assert hook.cache_signature() == TemporalScoreRescaling(0.7, 1.0).cache_signature()
