"""CFGOverride and DualModelGuider (today's ComfyUI, nodes_custom_sampler.py) on the tiny SD1 model."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from nodes.cfg_guidance import cfg_override, dual_model_guider
from nodes.errors import NodeInputError
from tests.nodes.model_patch_helpers import snapshot


@pytest.fixture(scope="module")
def two_models(tiny_sd1_ckpt):
    """The tiny SD1 model loaded twice (two base modules); the second's output conv scaled, so the
    two predict differently. Positive "a red cube", negative ""."""
    from comfy_core.loading import load_checkpoint
    from nodes.conditioning import clip_text_encode

    model_a, clip, _ = load_checkpoint(tiny_sd1_ckpt, output_vae=False)
    model_b, _, _ = load_checkpoint(tiny_sd1_ckpt, output_vae=False, output_clip=False)
    assert model_a.model is not model_b.model
    with torch.no_grad():
        for p in model_b.model.diffusion_model.out.parameters():
            p.mul_(1.5)
    return SimpleNamespace(a=model_a, b=model_b, positive=clip_text_encode("a red cube", clip)[0],
                           negative=clip_text_encode("", clip)[0])


def _x0_of_one_step(guider, sigma: float = 4.0, seed: int = 5) -> torch.Tensor:
    """The x0 prediction (model space) of one euler step from `sigma` to 0 on a zero latent."""
    from comfy_core.sampling.guider import sampler_object

    store = {}
    noise = torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(seed))
    guider.sample(noise, torch.zeros(1, 4, 8, 8), sampler_object("euler"), torch.tensor([sigma, 0.0]),
                  callback=lambda i, x0, x, total: store.setdefault("x0", x0.clone()))
    return store["x0"]


def _sample(guider, steps: int = 4, seed: int = 3) -> torch.Tensor:
    from comfy_core.sampling.guider import sampler_object

    sigmas = guider.model_patcher.get_model_object("model_sampling").sigmas.flip(0)[
        torch.linspace(0, 999, steps).round().long()].tolist() + [0.0]
    noise = torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(seed))
    return guider.sample(noise, torch.zeros(1, 4, 8, 8), sampler_object("euler"), torch.tensor(sigmas))


class _CallCounter:
    """Counts forward calls of a base module's UNet and records the attention backend in force."""

    def __init__(self, patcher):
        from comfy_core.attention import current_backend

        self.calls, self.backends = 0, []

        def hook(module, args, kwargs):
            self.calls += 1
            self.backends.append(current_backend().name)

        self.handle = patcher.model.diffusion_model.register_forward_pre_hook(hook, with_kwargs=True)

    def close(self):
        self.handle.remove()


def _cfg_recorder(log: list):
    def record(executor, *args, **kwargs):
        log.append((float(args[1].flatten()[0]), executor.class_obj.cfg))
        return executor(*args, **kwargs)
    return record


# -- CFGOverride -------------------------------------------------------------------------------

def test_cfg_override_sets_cfg_only_inside_its_sigma_range(two_models):
    from comfy_core.sampling.guider import cfg_guider
    from comfy_core.wrappers import WrappersMP

    model = two_models.a
    before = snapshot(model)
    patched = cfg_override(model, 1.0, 0.0, 0.5)[0]
    assert snapshot(model) == before and patched is not model
    log: list = []
    patched.add_wrapper_with_key(WrappersMP.PREDICT_NOISE, None, _cfg_recorder(log))  # innermost: sees the cfg used
    _sample(cfg_guider(patched, two_models.positive, two_models.negative, 7.0), steps=6)
    boundary = model.get_model_object("model_sampling").percent_to_sigma(0.5)
    assert len(log) == 6
    assert {cfg for sigma, cfg in log if sigma > boundary} == {1.0}
    assert {cfg for sigma, cfg in log if sigma <= boundary} == {7.0}


def test_cfg_override_over_the_whole_run_equals_sampling_at_that_cfg(two_models):
    from comfy_core.sampling.guider import cfg_guider

    m, pos, neg = two_models.a, two_models.positive, two_models.negative
    overridden = _sample(cfg_guider(cfg_override(m, 3.0, 0.0, 1.0)[0], pos, neg, 7.0))
    assert torch.equal(overridden, _sample(cfg_guider(m, pos, neg, 3.0)))
    assert not torch.equal(overridden, _sample(cfg_guider(m, pos, neg, 7.0)))


def test_the_override_nearest_the_sampler_wins_where_ranges_overlap(two_models):
    from comfy_core.sampling.guider import cfg_guider
    from comfy_core.wrappers import WrappersMP

    first = cfg_override(two_models.a, 2.0, 0.0, 1.0)[0]
    nearest = cfg_override(first, 5.0, 0.0, 0.5)[0]
    log: list = []
    nearest.add_wrapper_with_key(WrappersMP.PREDICT_NOISE, None, _cfg_recorder(log))
    _sample(cfg_guider(nearest, two_models.positive, two_models.negative, 7.0), steps=6)
    boundary = two_models.a.get_model_object("model_sampling").percent_to_sigma(0.5)
    assert {cfg for sigma, cfg in log if sigma > boundary} == {5.0}
    assert {cfg for sigma, cfg in log if sigma <= boundary} == {2.0}


def test_cfg_override_restores_the_guider_cfg_even_on_error():
    from comfy_core.model_patches.cfg_override import CFGOverride

    class FailingExecutor:
        class_obj = SimpleNamespace(cfg=7.0)

        def __call__(self, *args, **kwargs):
            assert self.class_obj.cfg == 2.0  # the override is in force inside the call
            raise RuntimeError("model failed")

    executor = FailingExecutor()
    with pytest.raises(RuntimeError, match="model failed"):
        CFGOverride(2.0, 0.5, 10.0)(executor, torch.zeros(1), torch.tensor([3.0]), {}, None)
    assert executor.class_obj.cfg == 7.0
    assert CFGOverride(2.0, 0.5, 10.0).cache_signature() == CFGOverride(2.0, 0.5, 10.0).cache_signature()


def test_cfg_override_range_is_half_open_at_the_end():
    from comfy_core.model_patches.cfg_override import in_override_range

    assert in_override_range(10.0, 0.5, 10.0) and not in_override_range(0.5, 0.5, 10.0)


def test_cfg_override_refuses_bad_input(two_models):
    with pytest.raises(NodeInputError, match="end_percent"):
        cfg_override(two_models.a, 1.0, 0.0, 1.5)
    with pytest.raises(NodeInputError, match="model"):
        cfg_override("not a model", 1.0, 0.0, 1.0)


# -- DualModelGuider -----------------------------------------------------------------------------

def test_dual_model_guider_runs_positive_on_model_and_negative_on_model_negative(two_models):
    from comfy_core.sampling.cfg import cfg_combine
    from comfy_core.sampling.guider import BasicGuider, DualModelGuider

    a, b = two_models.a, two_models.b
    guider = dual_model_guider(a, two_models.positive, 4.0, model_negative=b, negative=two_models.negative)[0]
    assert isinstance(guider, DualModelGuider)
    counters = _CallCounter(a), _CallCounter(b)
    try:
        got = _x0_of_one_step(guider)
    finally:
        for c in counters:
            c.close()
    assert (counters[0].calls, counters[1].calls) == (1, 1)  # one step: one positive pass, one negative pass
    cond_only = BasicGuider(a)
    cond_only.set_conds(two_models.positive)
    uncond_only = BasicGuider(b)
    uncond_only.set_conds(two_models.negative)
    expected = cfg_combine(_x0_of_one_step(cond_only), _x0_of_one_step(uncond_only), 4.0)
    assert torch.allclose(got, expected, atol=1e-6, rtol=0)
    # the same negative on the first model gives another result: the second model really ran it
    same_model = BasicGuider(a)
    same_model.set_conds(two_models.negative)
    assert not torch.allclose(got, cfg_combine(_x0_of_one_step(cond_only), _x0_of_one_step(same_model), 4.0))


def test_dual_model_guider_at_cfg_1_never_runs_the_negative_model(two_models):
    from comfy_core.sampling.guider import BasicGuider

    a, b = two_models.a, two_models.b
    guider = dual_model_guider(a, two_models.positive, 1.0, model_negative=b, negative=two_models.negative)[0]
    counter = _CallCounter(b)
    try:
        got = _x0_of_one_step(guider)
    finally:
        counter.close()
    assert counter.calls == 0 and guider.uncond_inner is None
    cond_only = BasicGuider(a)
    cond_only.set_conds(two_models.positive)
    assert torch.equal(got, _x0_of_one_step(cond_only))


def test_a_cfg_override_to_1_skips_the_negative_model_in_its_range(two_models):
    a, b = two_models.a, two_models.b
    overridden = cfg_override(a, 1.0, 0.0, 1.0)[0]
    guider = dual_model_guider(overridden, two_models.positive, 4.0, model_negative=b,
                               negative=two_models.negative)[0]
    counter = _CallCounter(b)
    try:
        _sample(guider, steps=3)
    finally:
        counter.close()
    assert counter.calls == 0


def test_both_passes_run_with_the_first_model_attention_backend_as_in_comfyui(two_models):
    # ComfyUI's backend choice travels in the first MODEL's model_options, which both passes get.
    a = two_models.a.clone()
    a.set_attention_backend("naive")
    b = two_models.b.clone()
    b.set_attention_backend("split")
    guider = dual_model_guider(a, two_models.positive, 4.0, model_negative=b, negative=two_models.negative)[0]
    counters = _CallCounter(a), _CallCounter(b)
    try:
        _x0_of_one_step(guider)
    finally:
        for c in counters:
            c.close()
    assert counters[0].backends == ["naive"] and counters[1].backends == ["naive"]


def test_a_negative_model_sharing_the_weights_with_other_patches_is_a_clear_error(two_models):
    from comfy_core.patching.errors import PatchConflictError

    a = two_models.a
    other = a.clone()
    other.add_object_patch("model_sampling", type(a.get_model_object("model_sampling"))(prediction="v"))
    guider = dual_model_guider(a, two_models.positive, 4.0, model_negative=other, negative=two_models.negative)[0]
    with pytest.raises(PatchConflictError):
        _x0_of_one_step(guider)
    # the very same MODEL in both sockets is ordinary CFG, run as two batches
    same = dual_model_guider(a, two_models.positive, 4.0, model_negative=a, negative=two_models.negative)[0]
    from comfy_core.sampling.guider import cfg_guider
    assert torch.allclose(_x0_of_one_step(same),
                          _x0_of_one_step(cfg_guider(a, two_models.positive, two_models.negative, 4.0)),
                          rtol=1e-5, atol=1e-4)  # batch 1 + 1 against batch 2: rounding only


def test_without_model_negative_it_is_the_plain_cfg_guider(two_models):
    from comfy_core.sampling.guider import CFGGuider, DualModelGuider, cfg_guider

    a, pos, neg = two_models.a, two_models.positive, two_models.negative
    guider = dual_model_guider(a, pos, 4.0, negative=neg)[0]
    assert type(guider) is CFGGuider and not isinstance(guider, DualModelGuider)
    assert torch.equal(_sample(guider), _sample(cfg_guider(a, pos, neg, 4.0)))


def test_without_negative_the_negative_pass_gets_no_text_tensor(two_models):
    guider = dual_model_guider(two_models.a, two_models.positive, 4.0, model_negative=two_models.b)[0]
    (entry,) = guider.original_conds["negative"]
    assert "cross_attn" not in entry
    assert torch.equal(guider.original_conds["positive"][0]["cross_attn"], two_models.positive[0][0])


def test_dual_model_guider_leaves_its_input_models_unchanged_and_refuses_bad_input(two_models):
    a, b = two_models.a, two_models.b
    before = snapshot(a), snapshot(b)
    _x0_of_one_step(dual_model_guider(a, two_models.positive, 4.0, model_negative=b, negative=two_models.negative)[0])
    assert (snapshot(a), snapshot(b)) == before
    with pytest.raises(NodeInputError, match="model_negative"):
        dual_model_guider(a, two_models.positive, 4.0, model_negative="nope")
    with pytest.raises(NodeInputError, match="negative"):
        dual_model_guider(a, two_models.positive, 4.0, model_negative=b, negative="nope")
