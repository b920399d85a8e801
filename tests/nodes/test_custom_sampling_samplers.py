"""SAMPLER nodes (KSamplerSelect, Sampler* parameter nodes, SamplerEulerCFGpp, SamplerLCMUpscale) and
the scheduler/sigma nodes: what each builds, their typed errors, and ComfyUI's sockets exactly."""
from __future__ import annotations

import pytest
import torch

from comfy_core.sampling.guider import SamplerObject
from comfy_core.sampling.samplers import registry
from nodes import sampler_nodes as sn
from nodes import scheduler_nodes as sch
from nodes.custom_sampling import cfg_guider_node, random_noise, sampler_custom_advanced
from nodes.errors import NodeInputError
from tests.nodes.test_custom_sampling import _c, _d, _toy_model


def _is(sampler, name: str, options: dict | None = None) -> bool:
    return (isinstance(sampler, SamplerObject) and sampler.sampler_function is registry.sampler_function(name)
            and sampler.extra_options == (options or {}))


def test_ksampler_select() -> None:
    for name in ("euler", "dpmpp_2m_sde_gpu", "uni_pc_bh2", "sa_solver_pece"):
        assert _is(sn.ksampler_select(name)[0], name)
    ddim = sn.ksampler_select("ddim")[0]
    assert _is(ddim, "euler") and ddim.inpaint_options == {"random": True}
    with pytest.raises(NodeInputError, match="sampler_name"):
        sn.ksampler_select("nope")


def test_parameter_nodes_pick_the_function_and_options() -> None:
    assert _is(sn.sampler_euler_ancestral(0.5, 0.9)[0], "euler_ancestral", {"eta": 0.5, "s_noise": 0.9})
    assert _is(sn.sampler_euler_ancestral_cfgpp(0.5, 0.9)[0], "euler_ancestral_cfg_pp", {"eta": 0.5, "s_noise": 0.9})
    assert _is(sn.sampler_lms(3)[0], "lms", {"order": 3})
    assert _is(sn.sampler_dpmpp_3m_sde(1.0, 0.5, "cpu")[0], "dpmpp_3m_sde", {"eta": 1.0, "s_noise": 0.5})
    assert _is(sn.sampler_dpmpp_3m_sde(1.0, 0.5, "gpu")[0], "dpmpp_3m_sde_gpu", {"eta": 1.0, "s_noise": 0.5})
    assert _is(sn.sampler_dpmpp_2m_sde("heun", 0.7, 1.0, "cpu")[0], "dpmpp_2m_sde",
               {"eta": 0.7, "s_noise": 1.0, "solver_type": "heun"})
    assert _is(sn.sampler_dpmpp_sde(1.0, 1.0, 0.3, "gpu")[0], "dpmpp_sde_gpu", {"eta": 1.0, "s_noise": 1.0, "r": 0.3})
    assert _is(sn.sampler_dpmpp_2s_ancestral(0.2, 1.0)[0], "dpmpp_2s_ancestral", {"eta": 0.2, "s_noise": 1.0})
    adaptive = sn.sampler_dpm_adaptative(2, 0.1, 0.01, 0.05, 0.0, 1.0, 0.0, 0.81, 0.0, 1.0)[0]
    assert _is(adaptive, "dpm_adaptive", {"order": 2, "rtol": 0.1, "atol": 0.01, "h_init": 0.05, "pcoeff": 0.0,
                                          "icoeff": 1.0, "dcoeff": 0.0, "accept_safety": 0.81, "eta": 0.0,
                                          "s_noise": 1.0})
    with pytest.raises(NodeInputError, match="noise_device"):
        sn.sampler_dpmpp_sde(1.0, 1.0, 0.5, "tpu")
    with pytest.raises(NodeInputError, match="solver_type"):
        sn.sampler_dpmpp_2m_sde("rk4", 1.0, 1.0, "cpu")


def test_er_sde_solver_types() -> None:
    er = sn.sampler_er_sde("ER-SDE", 2, 0.5, 0.8)[0]
    assert _is(er, "er_sde", {"s_noise": 0.8, "noise_scaler": None, "max_stage": 2})
    rev = sn.sampler_er_sde("Reverse-time SDE", 3, 0.5, 0.8)[0]
    assert rev.extra_options["s_noise"] == 0.8
    assert float(rev.extra_options["noise_scaler"](torch.tensor(4.0))) == pytest.approx(4.0 ** 1.5)
    for ode in (sn.sampler_er_sde("ODE", 3, 0.5, 0.8)[0], sn.sampler_er_sde("Reverse-time SDE", 3, 0.0, 0.8)[0]):
        assert ode.extra_options["s_noise"] == 0
        assert float(ode.extra_options["noise_scaler"](torch.tensor(4.0))) == 4.0  # x ** (0 + 1)


def test_sa_solver_tau_follows_the_percent_interval() -> None:
    model = _toy_model()
    ms = model.get_model_object("model_sampling")
    sampler = sn.sampler_sa_solver(model, 0.6, 0.2, 0.8, 1.0, 3, 4, True, False)[0]
    assert _is(sampler, "sa_solver", {**sampler.extra_options})
    tau = sampler.extra_options["tau_func"]
    inside = (ms.percent_to_sigma(0.2) + ms.percent_to_sigma(0.8)) / 2
    assert tau(inside) == 0.6 and tau(ms.percent_to_sigma(0.95)) == 0.0
    assert sampler.extra_options["use_pece"] is True and sampler.extra_options["predictor_order"] == 3


def test_euler_cfgpp_versions() -> None:
    """alternative: x1 = x + (x - 2 D + D_uncond) / s0 * (s1 - s0), D the CFG prediction."""
    assert _is(sn.sampler_euler_cfgpp("regular")[0], "euler_cfg_pp")
    m = _toy_model()
    s0, s1, cfg = 3.0, 0.5, 4.0
    noise = torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(9))
    guider = cfg_guider_node(m, _c(0.7), _c(-0.2), cfg)[0]
    out, _ = sampler_custom_advanced(random_noise(9)[0], guider, sn.sampler_euler_cfgpp("alternative")[0],
                                     torch.tensor([s0, s1]), {"samples": torch.zeros(1, 4, 8, 8)})
    x = noise * s0  # below sigma_max: latent + noise * sigma
    du = _d(x, s0, -0.2)
    d = du + cfg * (_d(x, s0, 0.7) - du)
    x1 = x + (x - 2 * d + du) / s0 * (s1 - s0)
    assert torch.allclose(out["samples"], x1 / 0.18215, atol=1e-4)
    with pytest.raises(NodeInputError, match="version"):
        sn.sampler_euler_cfgpp("newest")


def test_lcm_upscale_grows_the_latent() -> None:
    m = _toy_model()
    guider = cfg_guider_node(m, _c(0.3), _c(0.0), 1.0)[0]
    sigmas = torch.tensor([6.0, 3.0, 1.0, 0.5, 0.0])
    sampler = sn.sampler_lcm_upscale(2.0, -1, "bilinear")[0]
    assert sampler.extra_options == {"total_upscale": 2.0, "upscale_method": "bilinear", "upscale_steps": None}
    out, _ = sampler_custom_advanced(random_noise(1)[0], guider, sampler, sigmas, {"samples": torch.zeros(1, 4, 8, 8)})
    # default: max(5 // 2 + 1, 2) = 3 points of linspace(1, 2): the factors 1.5 then 2 after steps 0 and 1.
    assert out["samples"].shape == (1, 4, 16, 16)
    one = sn.sampler_lcm_upscale(1.5, 1, "nearest-exact")[0]
    out, _ = sampler_custom_advanced(random_noise(1)[0], guider, one, sigmas, {"samples": torch.zeros(1, 4, 8, 8)})
    assert out["samples"].shape == (1, 4, 12, 12)


def test_scheduler_nodes_delegate_with_comfyuis_arguments() -> None:
    from comfy_core.sampling.schedulers import get_sigmas_karras, get_sigmas_polyexponential

    assert torch.equal(sch.karras_scheduler(5, 10.0, 0.1, 7.0)[0], get_sigmas_karras(5, 0.1, 10.0, 7.0))
    assert torch.equal(sch.polyexponential_scheduler(5, 10.0, 0.1, 2.0)[0],
                       get_sigmas_polyexponential(5, 0.1, 10.0, 2.0))
    exp = sch.exponential_scheduler(4, 10.0, 0.1)[0]
    assert exp[0] == pytest.approx(10.0) and exp[-2] == pytest.approx(0.1) and float(exp[-1]) == 0.0
    model = _toy_model()
    beta = sch.beta_sampling_scheduler(model, 6, 0.6, 0.6)[0]
    assert float(beta[0]) == pytest.approx(float(model.get_model_object("model_sampling").sigma_max))
    with pytest.raises(NodeInputError, match="sigmas"):
        sch.flip_sigmas([1.0, 0.0])
    with pytest.raises(NodeInputError, match="spacing"):
        sch.extend_intermediate_sigmas(torch.tensor([1.0, 0.0]), 2, -1.0, 0.0, "cubic")
    with pytest.raises(NodeInputError, match="coeff"):
        sch.gits_scheduler(1.23, 10, 1.0)
    with pytest.raises(NodeInputError, match="model_type"):
        sch.align_your_steps_scheduler("SD3", 10, 1.0)
    with pytest.raises(NodeInputError, match="model"):
        sch.basic_scheduler("not a model", "karras", 10, 1.0)


