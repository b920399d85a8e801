"""Guidance patch nodes (CFGZeroStar, CFGNorm, APG, Mahiro, TCFG, Epsilon Scaling): /object_info
entries, the hook each adds (on a clone), a one-step KSampler run on a tiny SD1 checkpoint that
changes the result exactly as the method's formula predicts, and typed errors."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from comfy_core.sampling import cfg_patches as hooks
from graph.context import NodeContext, reset_current, set_current
from nodes import cfg_patches as cp
from nodes.errors import NodeInputError


@pytest.fixture(scope="module")
def sd1(sd1_with_prompts):
    return sd1_with_prompts


def test_each_node_adds_its_hook_to_a_clone(sd1) -> None:
    cases = [(cp.cfg_zero_star(sd1.model), "sampler_post_cfg_function", hooks.CFGZeroStar()),
             (cp.cfg_norm(sd1.model, 0.5), "sampler_post_cfg_function", hooks.CFGNorm(0.5)),
             (cp.mahiro(sd1.model), "sampler_post_cfg_function", hooks.Mahiro()),
             (cp.epsilon_scaling(sd1.model, 1.01), "sampler_post_cfg_function", hooks.EpsilonScaling(1.01)),
             (cp.tcfg(sd1.model), "sampler_pre_cfg_function", hooks.TCFG())]
    for (out,), key, hook in cases:
        assert out is not sd1.model and out.model_options[key] == [hook]
    (apg,) = cp.apg(sd1.model, 0.5, 3.0, 0.2)
    (hook,) = apg.model_options["sampler_pre_cfg_function"]
    assert (hook.eta, hook.norm_threshold, hook.momentum) == (0.5, 3.0, 0.2)
    assert apg.clone().model_options["sampler_pre_cfg_function"][0] is hook  # clones share the running average
    assert not {"sampler_post_cfg_function", "sampler_pre_cfg_function"} & set(sd1.model.model_options)
    # Patches stack, in the order applied.
    (both,) = cp.epsilon_scaling(cp.cfg_zero_star(sd1.model)[0], 1.005)
    assert both.model_options["sampler_post_cfg_function"] == [hooks.CFGZeroStar(), hooks.EpsilonScaling(1.005)]


def _one_step(model, sd1, cfg: float = 7.0) -> tuple[dict, torch.Tensor]:
    """One euler step of KSampler; returns what a post-CFG hook placed *before* the node's saw."""
    from nodes.sampling import ksampler

    token = set_current(NodeContext("p", "1", "1", None, SimpleNamespace(preview_method="none")))
    try:
        out = ksampler(model, 3, 1, cfg, "euler", "simple", sd1.positive, sd1.negative,
                       {"samples": torch.zeros(1, 4, 8, 8)}, 1.0)[0]["samples"]
    finally:
        reset_current(token)
    return out


def _recording(model) -> tuple[object, dict]:
    seen: dict = {}
    probe = model.clone()

    def record(args):
        seen.update({k: args[k].clone() for k in ("denoised", "cond_denoised", "uncond_denoised", "input")})
        return args["denoised"]

    probe.add_option_function("sampler_post_cfg_function", record)
    return probe, seen


def test_cfg_zero_star_one_step_on_sd1_matches_the_formula(sd1) -> None:
    probe, seen = _recording(sd1.model)
    (patched,) = cp.cfg_zero_star(probe)
    out = _one_step(patched, sd1)
    x, c, u = (seen[k].double().numpy() for k in ("input", "cond_denoised", "uncond_denoised"))
    np.testing.assert_allclose(seen["denoised"].double().numpy(), u + 7.0 * (c - u), rtol=1e-5, atol=1e-5)
    ec, eu = (x - c).ravel(), (x - u).ravel()
    alpha = ec @ eu / (eu @ eu + 1e-8)
    x0 = alpha * u + 7.0 * (c - alpha * u)
    # One euler step to sigma 0 lands on the guided x0, returned in VAE latent space.
    np.testing.assert_allclose(out.double().numpy(), x0 / 0.18215, rtol=1e-4, atol=1e-4)
    plain = _one_step(sd1.model, sd1)
    np.testing.assert_allclose(plain.double().numpy(), (u + 7.0 * (c - u)) / 0.18215, rtol=1e-4, atol=1e-4)


def test_epsilon_scaling_one_step_on_sd1_matches_the_formula(sd1) -> None:
    probe, seen = _recording(sd1.model)
    out = _one_step(cp.epsilon_scaling(probe, 1.2)[0], sd1)
    x, den = seen["input"].double().numpy(), seen["denoised"].double().numpy()
    np.testing.assert_allclose(out.double().numpy(), (x - (x - den) / 1.2) / 0.18215, rtol=1e-4, atol=1e-4)


def test_apg_and_tcfg_run_in_a_sampler(sd1) -> None:
    # Pre-CFG patches on a real run: finite, and different from plain CFG.
    plain = _one_step(sd1.model, sd1)
    for (patched,) in (cp.apg(sd1.model, 0.0, 5.0, 0.5), cp.tcfg(sd1.model)):
        out = _one_step(patched, sd1)
        assert bool(torch.isfinite(out).all()) and not torch.equal(out, plain)
    # APG at eta 1 without normalisation or momentum: CFG plus one more (cond - uncond), which is
    # plain CFG at scale + 1.
    out = _one_step(cp.apg(sd1.model, 1.0, 0.0, 0.0)[0], sd1, cfg=7.0)
    torch.testing.assert_close(out, _one_step(sd1.model, sd1, cfg=8.0), rtol=1e-4, atol=1e-4)


def test_bad_inputs_raise_typed_errors(sd1) -> None:
    with pytest.raises(NodeInputError, match="model"):
        cp.cfg_zero_star(None)
    with pytest.raises(NodeInputError, match="strength"):
        cp.cfg_norm(sd1.model, "x")
    with pytest.raises(NodeInputError, match="momentum"):
        cp.apg(sd1.model, 1.0, 5.0, float("nan"))
    with pytest.raises(NodeInputError, match="scaling_factor"):
        cp.epsilon_scaling(sd1.model, True)
