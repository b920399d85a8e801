"""EasyCache / LazyCache maths and wrappers (comfy_core/model_patches/step_cache.py), driven with
scripted inputs through the wrapper chains the runtime uses, against values worked out by hand.

The network in these tests is `f(x) = 3x + 1` on constant latents, subsample factor 1, so every
mean-absolute change is a plain number: inputs 1, 2, 3, 4 give outputs 4, 7, 10, 13."""
from __future__ import annotations

import logging
import math

import pytest
import torch

from comfy_core.model_patches import step_cache as sc
from comfy_core.models.model_sampling import FlowModelSampling
from comfy_core.wrappers import WrappersMP, run_wrapped

A, B = "uuid-a", "uuid-b"


def _lin(x: torch.Tensor, *_args, **_kwargs) -> torch.Tensor:
    return 3 * x + 1


class Net:
    """A counted network call, the wrapped function of the `diffusion_model` point."""

    def __init__(self, fn=_lin) -> None:
        self.fn, self.calls = fn, 0

    def __call__(self, x, t, context, y, control, transformer_options, **kwargs):
        self.calls += 1
        return self.fn(x)


def _easy(threshold: float = 0.5, **kw) -> sc.EasyCacheHolder:
    holder = sc.EasyCacheHolder(threshold, 0.0, 1.0, subsample_factor=1, **kw)
    holder.start_t, holder.end_t = 1e9, 0.0  # the whole run is in the window
    return holder


def _forward(net: Net, holder, x: torch.Tensor, uuids: list, sigma: float = 1.0, new_step: bool = True):
    """One network call as cond_batch makes it (after the step's calc_cond_batch wrapper)."""
    options = {sc.HOLDER_KEY: holder, "uuids": list(uuids), "sigmas": torch.full((x.shape[0],), sigma)}
    wrappers = {"wrappers": {WrappersMP.DIFFUSION_MODEL: {sc.EASYCACHE_KEY: [sc.easycache_forward_wrapper]}}}
    if new_step:
        model_options = {"transformer_options": options}
        step = {"wrappers": {WrappersMP.CALC_COND_BATCH: {sc.EASYCACHE_KEY: [sc.easycache_calc_cond_batch_wrapper]}}}
        run_wrapped(WrappersMP.CALC_COND_BATCH, {"transformer_options": step}, lambda *a: None, None, [], x,
                    options["sigmas"], model_options)
    return run_wrapped(WrappersMP.DIFFUSION_MODEL, {**options, **wrappers}, net, x, torch.zeros(1), None, None,
                       None, options, is_model_options=False)


def _full(value: float, batch: int = 1, channels: int = 4) -> torch.Tensor:
    return torch.full((batch, channels, 4, 4), float(value))


def test_pure_helpers():
    x = torch.arange(2 * 3 * 8 * 8, dtype=torch.float32).reshape(2, 3, 8, 8)
    assert sc.subsample(x, 4).shape == (2, 3, 2, 2) and torch.equal(sc.subsample(x, 4)[0, 0], x[0, 0, ::4, ::4])
    assert sc.subsample(x, 1) is x
    assert float(sc.mean_abs(torch.tensor([-1.0, 3.0]))) == 2.0
    # a network that returns fewer frames than it was given: the diff covers the last ones
    big, small = torch.zeros(1, 2, 5, 4), torch.ones(1, 2, 3, 4)
    assert sc.tail_slices(big.shape, small.shape) == (slice(None), slice(2, None), slice(None))
    added = sc.add_into_tail(big, small)
    assert added[:, :, :2].abs().sum() == 0 and torch.equal(added[:, :, 2:], small) and big.abs().sum() == 0
    assert sc.input_aligned(big, small).shape == small.shape
    assert [p.shape[0] for p in sc.batch_chunks(torch.zeros(6, 1), 3)] == [2, 2, 2]
    assert sc.speedup(10, 5) == 2.0 and sc.speedup(4, 4) == 1.0


def test_easycache_decisions_follow_the_hand_computed_estimate():
    holder, net = _easy(0.5), Net()
    assert torch.equal(_forward(net, holder, _full(1), [A]), _full(4))       # nothing known yet: runs
    assert torch.equal(_forward(net, holder, _full(2), [A]), _full(7))       # k unknown: runs, k = 3/1
    assert float(holder.relative_transformation_rate) == 3.0
    # input change 1, estimate 3 * 1 / 7 < 0.5: reused, x + (7 - 2)
    assert torch.equal(_forward(net, holder, _full(3), [A]), _full(8)) and net.calls == 2
    assert holder.total_steps_skipped == 1
    assert math.isclose(float(holder.cumulative_change_rate), 3 / 7, rel_tol=1e-6)
    # change from the last real input (2) is 2: 3/7 + 6/7 >= 0.5 -> runs, the sum restarts
    assert torch.equal(_forward(net, holder, _full(4), [A]), _full(13)) and net.calls == 3
    assert holder.cumulative_change_rate == 0.0 and float(holder.relative_transformation_rate) == 3.0


def test_easycache_threshold_zero_never_reuses():
    holder, net = _easy(0.0), Net()
    for value in range(1, 6):
        assert torch.equal(_forward(net, holder, _full(value), [A]), _full(3 * value + 1))
    assert net.calls == 5 and holder.total_steps_skipped == 0


def test_easycache_the_first_conditioning_decides_for_the_step():
    holder, net = _easy(0.5), Net()
    two = torch.cat([_full(1), _full(10)])  # [a, b] batched: a's half decides, norm over both
    _forward(net, holder, two, [A, B])
    assert holder.first_cond_uuid == A
    assert float(holder.output_prev_norm) == (4 + 31) / 2
    _forward(net, holder, torch.cat([_full(2), _full(20)]), [A, B])
    # k from a's half: (7 - 4) / (2 - 1) = 3; norm (7 + 61) / 2 = 34; estimate 3 / 34 < 0.5
    out = _forward(net, holder, torch.cat([_full(3), _full(30)]), [A, B])
    assert net.calls == 2
    assert torch.equal(out, torch.cat([_full(3 + 5), _full(30 + 41)]))  # each its own diff
    # cond and uncond in separate batches: b, alone, follows a's decision in the same step
    alone = _forward(net, holder, _full(40), [B], new_step=False)
    assert torch.equal(alone, _full(40 + 41)) and net.calls == 2
    assert holder.total_steps_skipped == 1  # counted once per step, by the deciding conditioning


def test_easycache_cannot_reuse_for_a_conditioning_it_has_no_diff_for():
    holder, net = _easy(3.0), Net()
    _forward(net, holder, _full(1), [A])
    _forward(net, holder, _full(2), [A])
    out = _forward(net, holder, torch.cat([_full(3), _full(3)]), [A, B])  # B is new: no diff to reuse
    assert net.calls == 3 and torch.equal(out, torch.cat([_full(10), _full(10)]))
    assert holder.cumulative_change_rate == 0.0


def test_easycache_window_and_channels():
    holder, net = _easy(3.0, output_channels=2), Net()
    holder.start_t, holder.end_t = 5.0, 1.0
    # above the start sigma: runs, nothing tracked (no deciding conditioning yet)
    _forward(net, holder, _full(1), [A], sigma=9.0)
    assert holder.first_cond_uuid is None and holder.x_prev_subsampled is None
    # an inpainting-style input: 4 channels in (2 of latent, 2 of mask / masked image, here 100x
    # the latent), 2 out; the diff is taken on the latent's channels
    def inpaint(value: float) -> torch.Tensor:
        return torch.cat([_full(value, channels=2), _full(100 * value, channels=2)], dim=1)

    net.fn = lambda t: 3 * t[:, :2] + 1
    _forward(net, holder, inpaint(2), [A], sigma=4.0)
    _forward(net, holder, inpaint(3), [A], sigma=3.0)
    out = _forward(net, holder, inpaint(4), [A], sigma=2.0)
    assert out.shape == (1, 2, 4, 4) and torch.equal(out, _full(4 + 7, channels=2)) and net.calls == 3
    # at or below the end sigma: the network runs whatever the estimate
    _forward(net, holder, inpaint(5), [A], sigma=1.0)
    assert net.calls == 4


def test_easycache_passes_through_calls_without_its_holder_or_a_cond_batch():
    net = Net()
    out = run_wrapped(WrappersMP.DIFFUSION_MODEL, {"wrappers": {WrappersMP.DIFFUSION_MODEL: {
        "k": [sc.easycache_forward_wrapper]}}}, net, _full(1), None, None, None, None, {}, is_model_options=False)
    assert torch.equal(out, _full(4)) and net.calls == 1


def test_a_changed_latent_shape_resets_the_state(caplog):
    holder, net = _easy(3.0), Net()
    _forward(net, holder, _full(1), [A])
    _forward(net, holder, _full(2), [A])
    with caplog.at_level(logging.WARNING, logger=sc.__name__):
        out = _forward(net, holder, torch.full((1, 4, 8, 8), 3.0), [A])
    assert "resetting state" in caplog.text
    assert net.calls == 3 and torch.equal(out, torch.full((1, 4, 8, 8), 10.0))
    assert holder.relative_transformation_rate is None  # measured afresh


def _lazy(threshold: float = 0.5) -> sc.LazyCacheHolder:
    holder = sc.LazyCacheHolder(threshold, 0.0, 1.0, subsample_factor=1)
    holder.start_t, holder.end_t = 1e9, 0.0
    return holder


def _predict(calls: list, holder, x: torch.Tensor, sigma: float = 1.0) -> torch.Tensor:
    def predict(x, timestep, model_options, seed):
        calls.append(x)
        return 3 * x + 1

    model_options = {"transformer_options": {sc.HOLDER_KEY: holder}}
    wrapped = {"transformer_options": {"wrappers": {WrappersMP.PREDICT_NOISE: {
        sc.LAZYCACHE_KEY: [sc.lazycache_predict_noise_wrapper]}}}}
    return run_wrapped(WrappersMP.PREDICT_NOISE, wrapped, predict, x, torch.tensor([sigma]), model_options, 0)


def test_lazycache_decisions_follow_the_hand_computed_estimate():
    holder, calls = _lazy(0.5), []
    assert torch.equal(_predict(calls, holder, _full(1)), _full(4))
    assert torch.equal(_predict(calls, holder, _full(2)), _full(7))
    assert torch.equal(_predict(calls, holder, _full(3)), _full(8)) and len(calls) == 2
    assert torch.equal(_predict(calls, holder, _full(4)), _full(13)) and len(calls) == 3
    assert holder.total_steps_skipped == 1


def test_lazycache_tracks_before_the_window_and_never_reuses_after_it():
    holder, calls = _lazy(3.0), []
    holder.start_t, holder.end_t = 5.0, 1.0
    _predict(calls, holder, _full(1), sigma=9.0)  # above the window: the reference is kept, no rate
    assert holder.x_prev_subsampled is not None and holder.relative_transformation_rate is None
    _predict(calls, holder, _full(2), sigma=4.0)  # first step inside: runs and measures k = 3
    assert float(holder.relative_transformation_rate) == 3.0
    assert torch.equal(_predict(calls, holder, _full(3), sigma=3.0), _full(8)) and len(calls) == 2
    _predict(calls, holder, _full(4), sigma=1.0)  # at the end sigma: runs
    assert len(calls) == 3


def test_the_window_comes_from_the_model_sampling():
    sampling = FlowModelSampling(1.0)
    holder = sc.LazyCacheHolder(0.2, 0.15, 0.95).prepare_timesteps(sampling)
    assert holder.start_t == pytest.approx(sampling.percent_to_sigma(0.15))
    assert holder.end_t == pytest.approx(sampling.percent_to_sigma(0.95))
    assert holder.should_do_easycache(torch.tensor([holder.start_t]))
    assert not holder.should_do_easycache(torch.tensor([holder.start_t + 0.01]))
    assert holder.is_past_end_timestep(torch.tensor([holder.end_t]))
    assert not holder.is_past_end_timestep(torch.tensor([holder.end_t + 0.01]))
    everything = sc.EasyCacheHolder(0.2, 0.0, 1.0).prepare_timesteps(sampling)
    assert everything.should_do_easycache(torch.tensor([1.0])) and not everything.is_past_end_timestep(
        torch.tensor([1e-4]))


def test_clone_keeps_settings_and_drops_state():
    holder, net = _easy(0.5), Net()
    _forward(net, holder, _full(1), [A])
    fresh = holder.clone()
    assert isinstance(fresh, sc.EasyCacheHolder) and fresh.cache_signature() == holder.cache_signature()
    assert fresh.uuid_cache_diffs == {} and fresh.x_prev_subsampled is None and fresh.first_cond_uuid is None
    assert holder.uuid_cache_diffs  # the original keeps its own
    assert sc.LazyCacheHolder(0.5, 0.1, 0.9).cache_signature() != sc.EasyCacheHolder(0.5, 0.1, 0.9).cache_signature()


@pytest.mark.parametrize("args", [(-0.1, 0.1, 0.9), (float("nan"), 0.1, 0.9), (0.2, -0.1, 0.9), (0.2, 0.1, 1.5),
                                  (0.2, "0.1", 0.9), (True, 0.1, 0.9)])
def test_bad_settings_are_refused(args):
    with pytest.raises(sc.StepCacheError):
        sc.EasyCacheHolder(*args)


def test_bad_subsample_factor_and_channels_are_refused():
    with pytest.raises(sc.StepCacheError, match="subsample_factor"):
        sc.LazyCacheHolder(0.2, 0.1, 0.9, subsample_factor=0)
    with pytest.raises(sc.StepCacheError, match="output_channels"):
        sc.LazyCacheHolder(0.2, 0.1, 0.9, output_channels=0)
