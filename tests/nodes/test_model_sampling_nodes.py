"""ModelSampling* nodes and RescaleCFG (ComfyUI's comfy_extras/nodes_model_advanced.py): /object_info
entries, the object patch each installs (never on the input MODEL), the sampler reading it on a
tiny SD1 checkpoint, and typed errors."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from comfy_core.models.model_sampling import (
    ContinuousEDMModelSampling, ContinuousVModelSampling, CosmosRFlowModelSampling, DiscreteModelSampling,
    DistilledModelSampling, FlowModelSampling, FluxModelSampling, ModelSampling, StableCascadeModelSampling,
)
from graph.context import NodeContext, reset_current, set_current
from nodes import model_sampling_nodes as msn
from nodes.errors import NodeInputError


@pytest.fixture(scope="module")
def sd1(sd1_with_prompts):
    return sd1_with_prompts


def _patched(model) -> object:
    return model.object_patches["model_sampling"]


def test_discrete_variants_are_object_patches_on_a_clone(sd1) -> None:
    base_ms = sd1.model.model.model_sampling
    for sampling, cls, prediction in [("eps", DiscreteModelSampling, "eps"), ("v_prediction", DiscreteModelSampling, "v"),
                                      ("x0", DiscreteModelSampling, "x0"), ("img_to_img", DiscreteModelSampling, "img_to_img"),
                                      ("lcm", DistilledModelSampling, "lcm")]:
        (out,) = msn.model_sampling_discrete(sd1.model, sampling, True)
        ms = _patched(out)
        assert out is not sd1.model and type(ms) is cls and ms.prediction == prediction and ms.zsnr
        assert out.get_model_object("model_sampling") is ms
    # The input MODEL and the shared diffusion model are untouched.
    assert "model_sampling" not in sd1.model.object_patches
    assert sd1.model.model.model_sampling is base_ms and not base_ms.zsnr
    (plain,) = msn.model_sampling_discrete(sd1.model, "eps", False)
    assert torch.equal(_patched(plain).sigmas, base_ms.sigmas)


def test_flow_flux_edm_v_and_cascade_tables(sd1) -> None:
    sd3 = _patched(msn.model_sampling_sd3(sd1.model, 3.0)[0])
    assert isinstance(sd3, FlowModelSampling) and sd3.shift == 3.0 and sd3.multiplier == 1000
    aura = _patched(msn.model_sampling_aura_flow(sd1.model, 1.73)[0])
    assert isinstance(aura, FlowModelSampling) and aura.shift == 1.73 and aura.multiplier == 1.0
    flux = _patched(msn.model_sampling_flux(sd1.model, 1.15, 0.5, 1024, 768)[0])
    # 1024x768 px = 128x96 latent = 64x48 = 3072 patches of 2x2: mu = 0.5 + 0.65 * (3072 - 256) / 3840.
    assert isinstance(flux, FluxModelSampling) and flux.shift == pytest.approx(0.5 + 0.65 * 2816 / 3840, rel=1e-12)
    edm = _patched(msn.model_sampling_continuous_edm(sd1.model, "edm", 120.0, 0.002)[0])
    assert isinstance(edm, ContinuousEDMModelSampling) and edm.prediction == "edm" and edm.sigma_data == 0.5
    assert float(edm.sigma_max) == pytest.approx(120.0, rel=1e-5) and float(edm.sigma_min) == pytest.approx(0.002, rel=1e-5)
    for sampling, prediction in (("v_prediction", "v"), ("eps", "eps")):
        ms = _patched(msn.model_sampling_continuous_edm(sd1.model, sampling, 80.0, 0.01)[0])
        assert ms.prediction == prediction and ms.sigma_data == 1.0
    cosmos = _patched(msn.model_sampling_continuous_edm(sd1.model, "cosmos_rflow", 80.0, 0.002)[0])
    assert isinstance(cosmos, CosmosRFlowModelSampling)
    cv = _patched(msn.model_sampling_continuous_v(sd1.model, "v_prediction", 500.0, 0.03)[0])
    assert isinstance(cv, ContinuousVModelSampling) and float(cv.sigma_max) == pytest.approx(500.0, rel=1e-5)
    sc = _patched(msn.model_sampling_stable_cascade(sd1.model, 2.0)[0])
    assert isinstance(sc, StableCascadeModelSampling) and sc.shift == 2.0


def _first_step(model, sd1, scheduler: str = "simple") -> dict:
    """Sample one euler step and return what the first guided prediction saw."""
    from nodes.sampling import ksampler

    seen: dict = {}
    probe = model.clone()

    def record(args):
        seen.setdefault("sigma", args["sigma"].clone())
        seen.setdefault("input", args["input"].clone())
        return args["denoised"]

    probe.add_option_function("sampler_post_cfg_function", record)
    token = set_current(NodeContext("p", "1", "1", None, SimpleNamespace(preview_method="none")))
    try:
        seen["out"] = ksampler(probe, 3, 1, 5.0, "euler", scheduler, sd1.positive, sd1.negative,
                               {"samples": torch.zeros(1, 4, 8, 8)}, 1.0)[0]["samples"]
    finally:
        reset_current(token)
    return seen


def test_the_sampler_uses_the_patched_schedule(sd1) -> None:
    from comfy_core.sampling.noise import prepare_noise

    noise = prepare_noise(torch.zeros(1, 4, 8, 8), 3)
    plain = _first_step(sd1.model, sd1)
    assert float(plain["sigma"][0]) == pytest.approx(float(ModelSampling().sigma_max), rel=1e-6)
    # Zero terminal SNR: the first sigma is the rescaled table's last one.
    zsnr = _first_step(msn.model_sampling_discrete(sd1.model, "eps", True)[0], sd1)
    assert float(zsnr["sigma"][0]) == pytest.approx(float(ModelSampling(zsnr=True).sigma_max), rel=1e-6)
    # Rectified flow: the run starts at sigma 1 from pure noise (sigma*noise + (1-sigma)*0).
    flow = _first_step(msn.model_sampling_sd3(sd1.model, 3.0)[0], sd1)
    assert float(flow["sigma"][0]) == 1.0
    torch.testing.assert_close(flow["input"], noise)
    assert not torch.equal(flow["out"], plain["out"])
    # The input MODEL still samples as before.
    assert torch.equal(_first_step(sd1.model, sd1)["out"], plain["out"])


def test_rescale_cfg_node_installs_the_cfg_function(sd1) -> None:
    from comfy_core.sampling.cfg_patches import RescaleCFG

    (out,) = msn.rescale_cfg(sd1.model, 0.7)
    assert out.model_options["sampler_cfg_function"] == RescaleCFG(0.7)
    assert "sampler_cfg_function" not in sd1.model.model_options


def test_rescale_cfg_one_step_on_sd1_matches_the_reference(sd1) -> None:
    from nodes.sampling import ksampler

    seen: dict = {}
    (patched,) = msn.rescale_cfg(sd1.model, 0.7)

    def record(args):  # runs after the cfg function: sees its result and the raw predictions
        seen.update({k: args[k].clone() for k in ("denoised", "cond_denoised", "uncond_denoised", "input", "sigma")})
        return args["denoised"]

    patched.add_option_function("sampler_post_cfg_function", record)
    token = set_current(NodeContext("p", "1", "1", None, SimpleNamespace(preview_method="none")))
    try:
        out = ksampler(patched, 3, 1, 7.0, "euler", "simple", sd1.positive, sd1.negative,
                       {"samples": torch.zeros(1, 4, 8, 8)}, 1.0)[0]["samples"]
    finally:
        reset_current(token)
    x, c, u = (seen[k].double().numpy() for k in ("input", "cond_denoised", "uncond_denoised"))
    s = float(seen["sigma"][0])
    a, b = 1 / math.sqrt(1 + s * s), s / math.sqrt(1 + s * s)
    v_c, v_u = a * (x - c) / s - b * c, a * (x - u) / s - b * u
    v_cfg = v_u + 7.0 * (v_c - v_u)
    v = 0.7 * v_cfg * v_c.std(ddof=1) / v_cfg.std(ddof=1) + 0.3 * v_cfg
    x0 = a * a * x - b * v
    np.testing.assert_allclose(seen["denoised"].double().numpy(), x0, rtol=1e-4, atol=1e-4)
    # One euler step to sigma 0 lands on the guided x0; the node returns it in VAE latent space.
    np.testing.assert_allclose(out.double().numpy(), x0 / 0.18215, rtol=1e-4, atol=1e-4)


def test_bad_inputs_raise_typed_errors(sd1) -> None:
    with pytest.raises(NodeInputError, match="model"):
        msn.model_sampling_sd3("not a model", 3.0)
    with pytest.raises(NodeInputError, match="sampling"):
        msn.model_sampling_discrete(sd1.model, "flow", False)
    with pytest.raises(NodeInputError, match="sigma_min"):
        msn.model_sampling_continuous_edm(sd1.model, "edm", 120.0, 0.0)
    with pytest.raises(NodeInputError, match="shift"):
        msn.model_sampling_stable_cascade(sd1.model, 0.0)
    with pytest.raises(NodeInputError, match="sampling"):
        msn.model_sampling_continuous_edm(sd1.model, "edm_playground_v2.5", 80.0, 0.002)
    with pytest.raises(NodeInputError, match="multiplier"):
        msn.rescale_cfg(sd1.model, float("nan"))
