"""Samplers on a toy denoiser with a known exact answer (Gaussian data).

Data x0 ~ N(mu, s^2) per element; the ideal denoiser is D(x, sigma) = (s^2 x + sigma^2 mu)/(s^2 + sigma^2)
and the probability-flow ODE from x_T at sigma_T ends at mu + (x_T - mu) s / sqrt(s^2 + sigma_T^2).
Deterministic samplers must converge to that; stochastic ones must produce N(mu, s^2) samples.
"""
from __future__ import annotations

import pytest
import torch

from comfy_core.models.model_sampling import ModelSampling
from comfy_core.sampling.noise import default_noise_sampler
from comfy_core.sampling.samplers.registry import (
    KSAMPLER_NAMES,
    SAMPLER_NAMES,
    UnknownSamplerError,
    implemented_sampler_names,
    sampler_function,
)
from comfy_core.sampling.schedulers import calculate_sigmas

MU, S = 0.3, 0.5


class Gaussian:
    """The exact denoiser for N(MU, S^2) data; counts calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, x: torch.Tensor, sigma: torch.Tensor, **_: object) -> torch.Tensor:
        self.calls += 1
        sg = sigma.reshape(-1, *([1] * (x.ndim - 1))).to(x.dtype)
        return (S * S * x + sg * sg * MU) / (S * S + sg * sg)


def exact(x_t: torch.Tensor, sigma_t: torch.Tensor) -> torch.Tensor:
    return MU + (x_t - MU) * S / (S * S + sigma_t ** 2) ** 0.5


def start(sigmas: torch.Tensor, shape=(2, 4, 6, 6), seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * sigmas[0]


def karras(n: int) -> torch.Tensor:
    return calculate_sigmas(ModelSampling(), "karras", n).double()


DETERMINISTIC = ["euler", "heun", "heunpp2", "dpm_2", "lms", "dpmpp_2m", "ipndm", "ipndm_v", "uni_pc", "uni_pc_bh2",
                 "res_multistep", "gradient_estimation", "dpm_fast", "ddim", "deis"]
# tolerance after 30 karras steps on the toy problem
TOL_30 = {"euler": 0.15, "ddim": 0.15, "heunpp2": 0.15, "gradient_estimation": 0.15}

STOCHASTIC = ["euler_ancestral", "dpm_2_ancestral", "dpmpp_2s_ancestral", "dpmpp_sde", "dpmpp_2m_sde",
              "dpmpp_2m_sde_heun", "dpmpp_3m_sde", "ddpm", "res_multistep_ancestral", "dpmpp_sde_gpu",
              "dpmpp_2m_sde_gpu", "dpmpp_3m_sde_gpu", "dpmpp_2m_sde_heun_gpu", "er_sde", "seeds_2", "seeds_3",
              "sa_solver", "sa_solver_pece"]


def test_names_are_comfyuis() -> None:
    assert len(KSAMPLER_NAMES) == 39 and len(SAMPLER_NAMES) == 42
    assert SAMPLER_NAMES[0] == "euler" and SAMPLER_NAMES[-3:] == ("ddim", "uni_pc", "uni_pc_bh2")
    required = {"euler", "euler_ancestral", "heun", "heunpp2", "dpm_2", "dpm_2_ancestral", "lms", "dpm_fast",
                "dpm_adaptive", "dpmpp_2s_ancestral", "dpmpp_sde", "dpmpp_2m", "dpmpp_2m_sde", "dpmpp_3m_sde",
                "ddpm", "lcm", "ddim", "uni_pc", "uni_pc_bh2"}
    assert required <= set(implemented_sampler_names())
    assert implemented_sampler_names() == SAMPLER_NAMES  # every ComfyUI name has a function


def test_unknown_names_raise() -> None:
    with pytest.raises(UnknownSamplerError, match="'bogus'"):
        sampler_function("bogus")


@pytest.mark.parametrize("name", DETERMINISTIC)
def test_deterministic_samplers_reach_the_exact_solution(name: str) -> None:
    sigmas = karras(30)
    x = start(sigmas)
    out = sampler_function(name)(Gaussian(), x.clone(), sigmas.clone(), extra_args={"seed": 0})
    target = exact(x, sigmas[0])
    if name == "dpm_fast":  # ComfyUI's dpm_fast stops at the last non-zero sigma
        target = MU + (x - MU) * (S * S + sigmas[-2] ** 2) ** 0.5 / (S * S + sigmas[0] ** 2) ** 0.5
    err = float((out - target).abs().max())
    assert err < TOL_30.get(name, 0.02), f"{name}: max error {err}"


@pytest.mark.parametrize("name,order", [("euler", 1), ("heun", 2), ("dpmpp_2m", 2), ("dpm_2", 2)])
def test_error_shrinks_with_steps_at_the_methods_order(name: str, order: int) -> None:
    errs = []
    for n in (20, 40):
        sigmas = karras(n)
        x = start(sigmas)
        out = sampler_function(name)(Gaussian(), x.clone(), sigmas)
        errs.append(float((out - exact(x, sigmas[0])).abs().max()))
    ratio = errs[0] / errs[1]
    assert ratio > 2 ** order * 0.6, f"{name}: errors {errs}"


def test_euler_converges_as_steps_grow() -> None:
    errs = []
    for n in (10, 40, 160):
        sigmas = karras(n)
        x = start(sigmas)
        errs.append(float((sampler_function("euler")(Gaussian(), x, sigmas) - exact(x, sigmas[0])).abs().max()))
    assert errs[0] > 3 * errs[1] > 9 * errs[2] and errs[2] < 0.03  # first order


def test_samplers_agree_with_each_other_on_fine_schedules() -> None:
    sigmas = karras(60)
    x = start(sigmas)
    outs = {n: sampler_function(n)(Gaussian(), x.clone(), sigmas.clone()) for n in ("heun", "dpmpp_2m", "uni_pc", "lms")}
    for a in outs.values():
        for b in outs.values():
            assert float((a - b).abs().max()) < 5e-3


def test_model_call_counts() -> None:
    sigmas = karras(10)
    for name, expected in [("euler", 10), ("heun", 19), ("dpm_2", 19), ("dpmpp_2m", 10), ("lms", 10),
                           ("dpmpp_sde", 19), ("uni_pc", 10), ("dpm_fast", 10)]:
        g = Gaussian()
        sampler_function(name)(g, start(sigmas), sigmas)
        assert g.calls == expected, name


def test_lms_last_step_returns_denoised_like_comfyui() -> None:
    sigmas = karras(5)
    seen = []
    out = sampler_function("lms")(Gaussian(), start(sigmas), sigmas, callback=lambda d: seen.append(d["denoised"]))
    assert torch.equal(out, seen[-1])


@pytest.mark.parametrize("name", STOCHASTIC + ["lcm"])
def test_stochastic_samplers_are_seeded_and_deterministic(name: str) -> None:
    sigmas = karras(8)
    x = start(sigmas)
    f = sampler_function(name)
    a = f(Gaussian(), x.clone(), sigmas.clone(), extra_args={"seed": 5})
    b = f(Gaussian(), x.clone(), sigmas.clone(), extra_args={"seed": 5})
    c = f(Gaussian(), x.clone(), sigmas.clone(), extra_args={"seed": 6})
    assert torch.equal(a, b)
    assert not torch.allclose(a, c)


@pytest.mark.parametrize("name", ["euler_ancestral", "dpm_2_ancestral", "dpmpp_2s_ancestral", "ddpm", "lcm"])
def test_ancestral_noise_is_the_default_noise_sampler_of_the_seed(name: str) -> None:
    sigmas = karras(6)
    x = start(sigmas)
    f = sampler_function(name)
    by_seed = f(Gaussian(), x.clone(), sigmas, extra_args={"seed": 9})
    explicit = f(Gaussian(), x.clone(), sigmas, noise_sampler=default_noise_sampler(x, seed=9))
    assert torch.equal(by_seed, explicit)


@pytest.mark.parametrize("name", [n for n in STOCHASTIC if not n.endswith("_gpu")])
def test_stochastic_samplers_sample_the_data_distribution(name: str) -> None:
    sigmas = karras(20)
    x = start(sigmas, shape=(1, 4, 32, 32), seed=1)
    out = sampler_function(name)(Gaussian(), x, sigmas, extra_args={"seed": 3})
    assert abs(float(out.mean()) - MU) < 0.03, float(out.mean())
    assert abs(float(out.std()) - S) < 0.1, float(out.std())  # coarse ancestral steps under-disperse a little


def test_eta_zero_ancestral_is_euler() -> None:
    from comfy_core.sampling.samplers.ancestral import sample_euler_ancestral

    sigmas = karras(12)
    x = start(sigmas)
    a = sample_euler_ancestral(Gaussian(), x.clone(), sigmas, eta=0.0, extra_args={"seed": 1})
    b = sampler_function("euler")(Gaussian(), x.clone(), sigmas)
    torch.testing.assert_close(a, b)


def test_dpm_adaptive_reaches_the_end_with_error_control() -> None:
    sigmas = karras(10)
    x = start(sigmas)
    from comfy_core.sampling.samplers.dpm_solver import sample_dpm_adaptive

    target = MU + (x - MU) * (S * S + sigmas[-2] ** 2) ** 0.5 / (S * S + sigmas[0] ** 2) ** 0.5
    loose, info = sample_dpm_adaptive(Gaussian(), x, sigmas[-2], sigmas[0], return_info=True)
    tight, tight_info = sample_dpm_adaptive(Gaussian(), x, sigmas[-2], sigmas[0], return_info=True,
                                            rtol=0.001, atol=0.0001)
    loose_err, tight_err = (float((o - target).abs().max()) for o in (loose, tight))
    assert tight_err < 0.01 and tight_err < loose_err
    assert tight_info["nfe"] > info["nfe"]
    assert info["n_accept"] > 0 and info["nfe"] >= 3 * info["steps"]


def test_callback_runs_once_per_step_and_can_stop_sampling() -> None:
    sigmas = karras(10)

    class Stop(Exception):
        pass

    for name in ("euler", "dpmpp_2m_sde", "uni_pc", "dpm_fast", "lcm"):
        steps = []

        def cb(info: dict) -> None:
            steps.append(info["i"])
            if info["i"] == 2:
                raise Stop

        g = Gaussian()
        with pytest.raises(Stop):
            sampler_function(name)(g, start(sigmas), sigmas, extra_args={"seed": 1}, callback=cb)
        assert steps == [0, 1, 2], name
        full = Gaussian()
        sampler_function(name)(full, start(sigmas), sigmas, extra_args={"seed": 1})
        assert g.calls < full.calls, name


def test_samplers_do_not_mutate_their_sigmas() -> None:
    sigmas = karras(6)
    keep = sigmas.clone()
    for name in implemented_sampler_names():
        model = _guided(MU, -MU, 2.0) if name.endswith("cfg_pp") else Gaussian()
        sampler_function(name)(model, start(sigmas), sigmas, extra_args={"seed": 0})
        assert torch.equal(sigmas, keep), name


@pytest.mark.parametrize("name", ["seeds_2", "seeds_3"])
def test_seeds_without_noise_solve_the_ode(name: str) -> None:
    sigmas = karras(30)
    x = start(sigmas)
    from comfy_core.sampling.samplers import stochastic_ei

    out = getattr(stochastic_ei, f"sample_{name}")(Gaussian(), x.clone(), sigmas, eta=0.0)
    assert float((out - exact(x, sigmas[0])).abs().max()) < 0.02


def _guided(pos_mu: float, neg_mu: float, cfg: float):
    """The real guided denoiser (CFGGuider under InpaintDenoiser, so CFG++ hooks run) around an
    ideal Gaussian model."""
    from comfy_core.sampling.guider import CFGGuider, InpaintDenoiser
    from comfy_core.sampling.conditioning import convert_cond, prepare_conds

    class Inner:
        model_sampling = ModelSampling()

        def apply_model(self, x, sigma, c_crossattn, y=None, transformer_options=None):
            mu = c_crossattn.mean(dim=(1, 2)).view(-1, 1, 1, 1).to(x.dtype)
            sg = sigma.view(-1, 1, 1, 1).to(x.dtype)
            return (S * S * x + sg * sg * mu) / (S * S + sg * sg)

    inner = Inner()
    conds = {"positive": convert_cond([[torch.full((1, 4, 2), pos_mu), {}]], "positive"),
             "negative": convert_cond([[torch.full((1, 4, 2), neg_mu), {}]], "negative")}
    p = prepare_conds(conds, torch.zeros(2, 4, 6, 6), inner.model_sampling, None)
    guider = CFGGuider(None)
    guider.inner_model, guider.conds, guider.cfg = inner, p, cfg
    return InpaintDenoiser(guider, torch.ones(1))


@pytest.mark.parametrize("pp,plain", [("euler_cfg_pp", "euler"), ("dpmpp_2m_cfg_pp", "dpmpp_2m"),
                                      ("res_multistep_cfg_pp", "res_multistep"),
                                      ("gradient_estimation_cfg_pp", "gradient_estimation"),
                                      ("euler_ancestral_cfg_pp", "euler_ancestral")])
def test_cfg_pp_equals_the_plain_sampler_when_cond_is_uncond(pp: str, plain: str) -> None:
    sigmas = karras(12)
    x = start(sigmas)
    a = sampler_function(pp)(_guided(MU, MU, 1.0), x.clone(), sigmas, extra_args={"seed": 0})
    b = sampler_function(plain)(_guided(MU, MU, 1.0), x.clone(), sigmas, extra_args={"seed": 0})
    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    c = sampler_function(pp)(_guided(MU, -MU, 3.0), x.clone(), sigmas, extra_args={"seed": 0})
    d = sampler_function(plain)(_guided(MU, -MU, 3.0), x.clone(), sigmas, extra_args={"seed": 0})
    assert not torch.allclose(c, d, atol=1e-3)


def test_cfg_pp_without_a_guided_denoiser_is_a_clear_error() -> None:
    from comfy_core.sampling.samplers.extra import CfgPPError

    sigmas = karras(4)
    with pytest.raises(CfgPPError, match="guided denoiser"):
        sampler_function("euler_cfg_pp")(Gaussian(), start(sigmas), sigmas)


@pytest.mark.parametrize("pece", [False, True])
def test_sa_solver_without_noise_solves_the_ode(pece: bool) -> None:
    from comfy_core.sampling.samplers.sa_solver import sample_sa_solver

    sigmas = karras(30)
    x = start(sigmas)
    out = sample_sa_solver(Gaussian(), x.clone(), sigmas, tau_func=lambda s: 0.0, use_pece=pece)
    assert float((out - exact(x, sigmas[0])).abs().max()) < 0.02


def test_dpmpp_2s_ancestral_cfg_pp_is_comfyui_0_3_64s_update() -> None:
    # ComfyUI 0.3.64 sample_dpmpp_2s_ancestral_cfg_pp, written out with the closed-form cond and
    # uncond denoisers (its final update reads the uncond of the midpoint call, so unlike the other
    # CFG++ samplers it is not the plain sampler when cond == uncond): in t = -log(sigma), x2 = (s_s/s_t)(x + D - U) - expm1(-h/2) D,
    # x' = (s_down/s_t)(x + D - U(x2)) - expm1(-h) D(x2), then + noise * sigma_up.
    sigmas = karras(6)
    x = start(sigmas)
    out = sampler_function("dpmpp_2s_ancestral_cfg_pp")(_guided(MU, -MU, 3.0), x.clone(), sigmas,
                                                          extra_args={"seed": 5})

    def ideal(x, sg, mu):
        return (S * S * x + sg * sg * mu) / (S * S + sg * sg)

    def cfg(x, sg):
        u = ideal(x, sg, -MU)
        return u + 3.0 * (ideal(x, sg, MU) - u), u

    gen = torch.Generator().manual_seed(5)
    ref = x.clone()
    for i in range(len(sigmas) - 1):
        s_i, s_next = sigmas[i], sigmas[i + 1]
        d, u = cfg(ref, s_i)
        s_up = torch.minimum(s_next, (s_next ** 2 * (s_i ** 2 - s_next ** 2) / s_i ** 2) ** 0.5)
        s_down = (s_next ** 2 - s_up ** 2) ** 0.5
        if s_down == 0:
            ref = d
        else:
            h = torch.log(s_i) - torch.log(s_down)
            s_mid = torch.exp(-(-torch.log(s_i) + h / 2))
            x2 = (s_mid / s_i) * (ref + d - u) - torch.expm1(-h / 2) * d
            d2, u2 = cfg(x2, s_mid)
            ref = (s_down / s_i) * (ref + d - u2) - torch.expm1(-h) * d2
        if s_next > 0:
            ref = ref + torch.randn(ref.shape, generator=gen, dtype=ref.dtype) * s_up
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
