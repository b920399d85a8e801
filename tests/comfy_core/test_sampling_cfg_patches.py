"""The guidance patches (RescaleCFG, CFG-Zero*, CFGNorm, APG, Mahiro, TCFG, Epsilon Scaling), each
against its method's formula written here from the papers' definitions (float64 numpy where
possible), on random predictions."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from comfy_core.patching.signature import freeze
from comfy_core.sampling.cfg_patches import APG, TCFG, CFGNorm, CFGZeroStar, EpsilonScaling, Mahiro, RescaleCFG

G = torch.Generator().manual_seed(7)
X = torch.randn(2, 4, 6, 6, generator=G) * 3
C = torch.randn(2, 4, 6, 6, generator=G)  # positive x0 prediction
U = torch.randn(2, 4, 6, 6, generator=G)  # negative x0 prediction
SIGMA = torch.tensor([2.5, 0.8])
SCALE = 6.0


def d(t: torch.Tensor) -> np.ndarray:
    return t.double().numpy()


def post_args(denoised: torch.Tensor | None = None) -> dict:
    den = U + (C - U) * SCALE if denoised is None else denoised
    return {"denoised": den, "cond": [], "uncond": [], "cond_scale": SCALE, "model": None, "uncond_denoised": U,
            "cond_denoised": C, "sigma": SIGMA, "model_options": {}, "input": X}


def pre_args(sigma: torch.Tensor = SIGMA, conds_out: list | None = None) -> dict:
    return {"conds": [[{}], [{}]], "conds_out": [C, U] if conds_out is None else conds_out, "cond_scale": SCALE,
            "timestep": sigma, "input": X, "sigma": sigma, "model": None, "model_options": {}}


def test_rescale_cfg_is_lins_std_rescale_in_v_space() -> None:
    args = {"cond": X - C, "uncond": X - U, "cond_scale": SCALE, "timestep": SIGMA, "input": X, "sigma": SIGMA,
            "cond_denoised": C, "uncond_denoised": U, "model": None, "model_options": {}}
    phi = 0.7
    noise = RescaleCFG(phi)(args)
    # Lin et al. 2023: v = a*eps - b*x0 with a = 1/sqrt(1+s^2), b = s/sqrt(1+s^2), and x0 = a^2 x - b v.
    s = d(SIGMA).reshape(-1, 1, 1, 1)
    a, b = 1 / np.sqrt(1 + s * s), s / np.sqrt(1 + s * s)
    x, c, u = d(X), d(C), d(U)
    v_c, v_u = a * (x - c) / s - b * c, a * (x - u) / s - b * u
    v_cfg = v_u + SCALE * (v_c - v_u)
    std = lambda v: v.reshape(v.shape[0], -1).std(axis=1, ddof=1).reshape(-1, 1, 1, 1)  # noqa: E731
    v_final = phi * v_cfg * std(v_c) / std(v_cfg) + (1 - phi) * v_cfg
    x0 = a * a * x - b * v_final
    np.testing.assert_allclose(d(X - noise), x0, rtol=1e-4, atol=1e-4)


def test_rescale_cfg_at_zero_multiplier_is_plain_cfg() -> None:
    args = {"cond": X - C, "uncond": X - U, "cond_scale": SCALE, "input": X, "sigma": SIGMA}
    torch.testing.assert_close(X - RescaleCFG(0.0)(args), U + (C - U) * SCALE, rtol=1e-4, atol=1e-4)


def test_cfg_zero_star_scales_the_negative_by_its_projection_coefficient() -> None:
    out = CFGZeroStar()(post_args())
    x, c, u = d(X), d(C), d(U)
    ec, eu = (x - c).reshape(2, -1), (x - u).reshape(2, -1)
    alpha = ((ec * eu).sum(1) / ((eu * eu).sum(1) + 1e-8)).reshape(-1, 1, 1, 1)
    # CFG-Zero*: guidance relative to the scaled negative, u' = alpha * u.
    expected = alpha * u + SCALE * (c - alpha * u)
    np.testing.assert_allclose(d(out), expected, rtol=1e-4, atol=1e-4)


def test_cfg_norm_caps_the_channel_norm_at_the_positives() -> None:
    den = U + (C - U) * SCALE
    out = CFGNorm(0.9)(post_args(den))
    nc = np.linalg.norm(d(C), axis=1, keepdims=True)
    nd = np.linalg.norm(d(den), axis=1, keepdims=True)
    expected = d(den) * np.clip(nc / (nd + 1e-8), 0, 1) * 0.9
    np.testing.assert_allclose(d(out), expected, rtol=1e-5, atol=1e-5)
    # Where the guided norm is below the positive's nothing changes (strength 1).
    small = C * 0.5
    torch.testing.assert_close(CFGNorm(1.0)(post_args(small)), small)


def _apg_reference(c, u, scale, eta, threshold, avg):
    g = c - u if avg is None else avg
    if threshold > 0:
        n = np.sqrt((g * g).sum(axis=(1, 2, 3), keepdims=True))
        g = g * np.minimum(1.0, threshold / n)
    unit = c / np.sqrt((c * c).sum(axis=(1, 2, 3), keepdims=True))
    par = (g * unit).sum(axis=(1, 2, 3), keepdims=True) * unit
    return u + (g - par) + eta * par + (c - u) / scale


@pytest.mark.parametrize("eta,threshold", [(1.0, 0.0), (0.0, 5.0), (0.5, 2.0)])
def test_apg_projects_the_guidance_on_the_positive(eta: float, threshold: float) -> None:
    out = APG(eta, threshold, 0.0)(pre_args())
    assert out[1] is U
    expected = _apg_reference(d(C), d(U), SCALE, eta, threshold, None)
    np.testing.assert_allclose(d(out[0]), expected, rtol=1e-4, atol=1e-4)
    # After the ordinary CFG combination: u + scale * modified + (c - u).
    cfg = out[1] + (out[0] - out[1]) * SCALE
    if eta == 1.0 and threshold == 0.0:  # nothing modified: plain CFG plus one more (c - u)
        torch.testing.assert_close(cfg, U + SCALE * (C - U) + (C - U), rtol=1e-4, atol=1e-4)


def test_apg_momentum_is_a_running_average_reset_by_a_new_run() -> None:
    hook = APG(1.0, 0.0, 0.5)
    g1, c2 = d(C - U), C * 1.5
    hook(pre_args(torch.tensor([3.0, 3.0])))
    out2 = hook(pre_args(torch.tensor([2.0, 2.0]), [c2, U]))
    avg = 0.5 * g1 + d(c2 - U)
    np.testing.assert_allclose(d(out2[0]), _apg_reference(d(c2), d(U), SCALE, 1.0, 0.0, avg), rtol=1e-4, atol=1e-4)
    # sigma rises: a new sampling run, the average starts again from this step's guidance.
    out3 = hook(pre_args(torch.tensor([5.0, 5.0])))
    np.testing.assert_allclose(d(out3[0]), _apg_reference(d(C), d(U), SCALE, 1.0, 0.0, None), rtol=1e-4, atol=1e-4)
    assert hook(pre_args(conds_out=[C])) == [C]  # positive alone (cfg 1): untouched


def test_mahiro_blends_cfg_and_leap_by_cosine_similarity() -> None:
    den = U + (C - U) * SCALE
    out = Mahiro()(post_args(den))
    leap, u_leap, cfg = d(C) * SCALE, d(U) * SCALE, d(den)
    merge = (leap + cfg) / 2
    nu, nm = np.sign(u_leap) * np.sqrt(np.abs(u_leap)), np.sign(merge) * np.sqrt(np.abs(merge))
    cos = (nu * nm).sum(1) / np.maximum(np.linalg.norm(nu, axis=1) * np.linalg.norm(nm, axis=1), 1e-8)
    w = 2 * (cos.mean() + 1)
    np.testing.assert_allclose(d(out), (w * cfg + (4 - w) * leap) / 4, rtol=1e-4, atol=1e-4)


def test_tcfg_keeps_only_the_negatives_component_along_the_main_direction() -> None:
    out = TCFG()(pre_args())
    assert out[0] is C
    x = d(X)
    for i in range(2):
        ec, eu = (x - d(C))[i].ravel(), (x - d(U))[i].ravel()
        _, _, vh = np.linalg.svd(np.stack([eu, ec]), full_matrices=False)
        v1 = vh[0]
        damped = (eu @ v1) * v1
        np.testing.assert_allclose(d(out[1])[i].ravel(), x[i].ravel() - damped, rtol=1e-4, atol=1e-4)
    # Skipped without a negative.
    args = pre_args()
    args["conds"] = [[{}], None]
    assert TCFG()(args) is args["conds_out"]


def test_epsilon_scaling_divides_the_guided_noise() -> None:
    den = U + (C - U) * SCALE
    out = EpsilonScaling(1.005)(post_args(den))
    np.testing.assert_allclose(d(out), d(X) - (d(X) - d(den)) / 1.005, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(EpsilonScaling(1.0)(post_args(den)), den, rtol=1e-6, atol=1e-5)


def test_settings_are_the_cache_identity() -> None:
    assert freeze(RescaleCFG(0.7)) == freeze(RescaleCFG(0.7)) != freeze(RescaleCFG(0.5))
    assert freeze(EpsilonScaling(1.005)) != freeze(EpsilonScaling(1.01))
    assert freeze(CFGZeroStar()) == freeze(CFGZeroStar())
    # APG holds a running average: its identity is the object.
    assert freeze(APG(1.0, 5.0, 0.0)) != freeze(APG(1.0, 5.0, 0.0))
    assert math.isfinite(float(CFGNorm(1.0)(post_args()).abs().max()))
