"""Hooks in sampling: the entries of a hook group run with the group's weights on the model
(ComfyUI's comfy/samplers.py `_calc_cond_batch` grouping and comfy/model_patcher.py
`patch_hooks`), keyframes switch the strength at the right step, weights are recomputed only
when a group's strength changes, strength 0 is no hook at all, and the model comes back exactly."""
from __future__ import annotations

import pytest
import torch

from comfy_core.hooks import HookGroup, HookKeyframe, HookKeyframeGroup, create_hook_lora, create_hook_model_as_lora
from comfy_core.hooks import patch_weights_from_model
from comfy_core.hooks.conditioning import set_conds_props
from comfy_core.hooks.sampling import HookRun
from comfy_core.lora import load_lora_for_models
from comfy_core.sampling import ksampler

CFG = 6.0


def hooked(cond, hooks):
    return set_conds_props([cond], 1.0, "default", hooks=hooks)[0]


def cfg_expected(cond_preds, uncond_preds, cfg=CFG):
    """ComfyUI's CFG on x0 predictions, from separately computed positive and negative ones."""
    return [u + (c - u) * cfg for c, u in zip(cond_preds, uncond_preds)]


def assert_all_equal(got, expected):
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert torch.equal(g, e), f"step {i}: max |diff| {(g - e).abs().max().item()}"


def test_a_lora_hook_on_the_positive_is_the_lora_model_for_the_positive_only(sd1, predict, sigmas):
    hooks = create_hook_lora(sd1.unet_lora, 1.0, 1.0)
    lora_model = load_lora_for_models(sd1.model, None, sd1.unet_lora, 1.0, 0.0)[0]
    got = predict(sd1.model, {"positive": hooked(sd1.positive, hooks), "negative": sd1.negative}, sigmas, CFG)
    cond = predict(lora_model, {"positive": sd1.positive}, sigmas)
    uncond = predict(sd1.model, {"positive": sd1.negative}, sigmas)
    assert_all_equal(got, cfg_expected(cond, uncond))
    plain = predict(sd1.model, {"positive": sd1.positive, "negative": sd1.negative}, sigmas, CFG)
    assert not torch.equal(got[0], plain[0])


def test_a_hook_goes_on_top_of_the_models_own_lora(sd1, predict, sigmas, tmp_path):
    from safetensors.torch import load_file

    from tests.fixtures.loras import write_unet_lora

    own = load_file(str(write_unet_lora(tmp_path / "own.safetensors", sd1.model, 9, targets=("to_q.weight",))))
    patched = load_lora_for_models(sd1.model, None, own, 0.7, 0.0)[0]
    both = load_lora_for_models(patched, None, sd1.unet_lora, 0.5, 0.0)[0]
    hooks = create_hook_lora(sd1.unet_lora, 0.5, 1.0)
    got = predict(patched, {"positive": hooked(sd1.positive, hooks), "negative": sd1.negative}, sigmas, CFG)
    cond = predict(both, {"positive": sd1.positive}, sigmas)
    uncond = predict(patched, {"positive": sd1.negative}, sigmas)
    assert_all_equal(got, cfg_expected(cond, uncond))


def test_a_model_as_lora_hook_adds_the_difference_to_the_other_checkpoint(sd1, predict, sigmas, tmp_path):
    from comfy_core.loading import load_checkpoint
    from tests.fixtures.checkpoints import write_tiny_checkpoint

    other = load_checkpoint(write_tiny_checkpoint(tmp_path / "other.safetensors", "sd1", seed=1),
                            output_vae=False, output_clip=False)[0]
    weights = patch_weights_from_model(other.model_state_dict())
    hooks = create_hook_model_as_lora(weights, None, 0.25, 1.0)
    originals = sd1.model.model_state_dict()
    expected_model = sd1.model.clone()
    expected_model.add_patches({k: ("diff", (w.float() - originals[k].float(),)) for k, w in weights.items()}, 0.25)
    got = predict(sd1.model, {"positive": hooked(sd1.positive, hooks)}, sigmas)
    assert_all_equal(got, predict(expected_model, {"positive": sd1.positive}, sigmas))


@pytest.mark.parametrize("later", [0.5, 0.0])
def test_keyframes_switch_the_strength_at_the_step_their_percent_is_reached(sd1, predict, recorder, sigmas, later):
    from comfy_core.sampling.guider import CFGGuider

    hooks = create_hook_lora(sd1.unet_lora, 1.0, 1.0).clone()
    hooks.set_keyframes_on_hooks(HookKeyframeGroup([HookKeyframe(1.0, 0.0), HookKeyframe(later, 0.5)]))
    guider = CFGGuider(sd1.model)
    guider.set_conds(hooked(sd1.positive, hooks), sd1.negative)
    guider.set_cfg(CFG)
    rec = recorder(guider, sigmas)
    first, report = load_lora_for_models(sd1.model, None, sd1.unet_lora, 1.0, 0.0)[::2]
    # Strength 0 is no hook at all: the plain model.
    second = load_lora_for_models(sd1.model, None, sd1.unet_lora, later, 0.0)[0] if later else sd1.model
    before_preds = predict(first, {"positive": sd1.positive}, sigmas)
    after_preds = predict(second, {"positive": sd1.positive}, sigmas)
    uncond = predict(sd1.model, {"positive": sd1.negative}, sigmas)
    # The 0.5 keyframe starts at the first step whose sigma is at or below its sigma.
    start = sd1.model.model_sampling.percent_to_sigma(0.5)
    before = [float(s) > start for s in sigmas[:-1]]
    assert before == [True, True, False, False]  # the 4-step normal schedule straddles it
    cond = [b_ if b else a_ for b_, a_, b in zip(before_preds, after_preds, before)]
    assert_all_equal(rec.outputs, cfg_expected(cond, uncond))
    # Patched weights are computed at the first step and again only when the strength changes
    # (none at all for strength 0).
    n = report.model_keys
    assert rec.weights_computed == ([n, n, 2 * n, 2 * n] if later else [n] * 4)


def test_a_hook_group_is_computed_once_and_then_reused(sd1, recorder, sigmas):
    from comfy_core.sampling.guider import BasicGuider

    hooks = create_hook_lora(sd1.unet_lora, 1.0, 1.0)
    guider = BasicGuider(sd1.model)
    guider.set_conds(hooked(sd1.positive, hooks))
    rec = recorder(guider, sigmas)
    n = load_lora_for_models(sd1.model, None, sd1.unet_lora, 1.0, 0.0)[2].model_keys
    assert n > 0 and rec.weights_computed == [n] * 4


def sample(model, positive, negative, steps=3):
    torch.manual_seed(0)
    noise = torch.randn(1, 4, 8, 8)
    return ksampler.sample(model, noise, steps, CFG, "euler", "normal", positive, negative, torch.zeros(1, 4, 8, 8))


@pytest.mark.parametrize("how", ["strength_model", "keyframe"])
def test_hooks_at_strength_zero_sample_exactly_as_no_hooks(sd1, how):
    if how == "strength_model":
        hooks = create_hook_lora(sd1.unet_lora, 0.0, 1.0)
    else:
        hooks = create_hook_lora(sd1.unet_lora, 1.0, 1.0).clone()
        hooks.set_keyframes_on_hooks(HookKeyframeGroup([HookKeyframe(0.0, 0.0)]))
    # One group on both prompts (ComfyUI's pair node shares it), so the batches are the same.
    positive, negative = set_conds_props([sd1.positive, sd1.negative], 1.0, "default", hooks=hooks)
    assert positive[0][1]["hooks"] is negative[0][1]["hooks"]
    assert torch.equal(sample(sd1.model, positive, negative), sample(sd1.model, sd1.positive, sd1.negative))


def _snapshot(patcher):
    return {k: (p, p.detach().clone()) for k, p in patcher.model.named_parameters()}


def _assert_restored(patcher, snapshot):
    now = dict(patcher.model.named_parameters())
    assert now.keys() == snapshot.keys()
    for k, (obj, value) in snapshot.items():
        assert now[k] is obj and torch.equal(now[k], value), k


def test_the_models_weights_are_back_exactly_after_sampling_with_hooks(sd1):
    patched = load_lora_for_models(sd1.model, None, sd1.unet_lora, 0.3, 0.0)[0]
    with patched.applied() as module:
        applied_before = {k: p.detach().clone() for k, p in module.named_parameters()}
    snapshot = _snapshot(patched)
    hooks = create_hook_lora(sd1.unet_lora, 1.0, 1.0)
    sample(patched, hooked(sd1.positive, hooks), sd1.negative)
    _assert_restored(patched, snapshot)
    with patched.applied() as module:  # the model's own patched weights were not touched either
        for k, p in module.named_parameters():
            assert torch.equal(p, applied_before[k]), k


def test_the_weights_are_back_when_a_hooked_evaluation_fails(sd1):
    failing = sd1.model.clone()

    def wrapper(apply_model, args):
        raise RuntimeError("stop")

    failing.set_option("model_function_wrapper", wrapper)
    snapshot = _snapshot(failing)
    with pytest.raises(RuntimeError, match="stop"):
        sample(failing, hooked(sd1.positive, create_hook_lora(sd1.unet_lora, 1.0, 1.0)), sd1.negative)
    _assert_restored(failing, snapshot)
    assert not failing.in_use


def test_only_registered_hooks_stay_on_the_entries():
    empty = HookGroup()
    conds = {"positive": [{"hooks": empty}], "negative": [{}]}
    assert HookRun.for_conds(object(), conds) is None
    assert conds == {"positive": [{}], "negative": [{}]}  # no hook registered: every `hooks` removed
