"""Context windows (comfy_core/sampling/context_windows.py, context_schedules.py): ComfyUI's window
schedules and fuse weights, derived here by hand; the handler inside `calc_cond_batch` on 4-D
batch-as-frames (dim 0) and 5-D video latents (dim 2): windows of the given length, conds sliced
where they carry the frame axis, per-frame models unchanged by windowing, callbacks, errors."""
from __future__ import annotations

import pytest
import torch

from comfy_core.wrappers import add_callback_with_key
from comfy_core.sampling.cond_batch import calc_cond_batch
from comfy_core.sampling.context_schedules import ContextWindowError, get_missing_indexes, ordered_halving
from comfy_core.sampling.context_windows import (
    CONTEXT_WINDOW_OPTION, ContextFuseMethods, ContextSchedules, IndexListCallbacks, _prepare_sampling_wrapper,
    context_handler, get_context_weights,
)

SCHEDULES = [ContextSchedules.STATIC_STANDARD, ContextSchedules.UNIFORM_STANDARD, ContextSchedules.UNIFORM_LOOPED,
             ContextSchedules.BATCHED]
SIGMAS = torch.tensor([14.6, 7.0, 3.0, 1.0, 0.0])


def windows(schedule: str, n: int, length: int, overlap: int, stride: int = 1, closed_loop: bool = False,
            step: int = 0) -> list[list[int]]:
    h = context_handler(schedule, "flat", length, overlap, stride, closed_loop)
    h._step = step
    return h.context_schedule.func(n, h, {})


# --- schedules ---

def test_ordered_halving_is_the_bit_reversed_fraction():
    assert [ordered_halving(i) for i in range(6)] == [0.0, 0.5, 0.25, 0.75, 0.125, 0.625]


def test_static_standard_steps_by_length_minus_overlap_and_ends_on_the_last_frame():
    assert windows("standard_static", 10, 4, 1) == [[0, 1, 2, 3], [3, 4, 5, 6], [6, 7, 8, 9]]
    assert windows("standard_static", 11, 4, 1) == [[0, 1, 2, 3], [3, 4, 5, 6], [6, 7, 8, 9], [7, 8, 9, 10]]
    assert windows("standard_static", 4, 4, 1) == [[0, 1, 2, 3]]
    assert windows("standard_static", 3, 4, 1) == [[0, 1, 2]]
    # the same windows at every step
    assert windows("standard_static", 11, 4, 1, step=3) == windows("standard_static", 11, 4, 1)


def test_batched_cuts_without_overlap_and_keeps_a_short_last_window():
    assert windows("batched", 10, 4, 0) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert windows("batched", 8, 4, 7) == [[0, 1, 2, 3], [4, 5, 6, 7]]  # the overlap is not used


def test_uniform_looped_wraps_and_shifts_by_the_step():
    assert windows("looped_uniform", 10, 4, 1) == [[0, 1, 2, 3], [3, 4, 5, 6], [6, 7, 8, 9]]
    # closed loop: one more window, blending the end into the start
    assert windows("looped_uniform", 10, 4, 1, closed_loop=True) == [[0, 1, 2, 3], [3, 4, 5, 6], [6, 7, 8, 9],
                                                                      [9, 0, 1, 2]]
    # step 1: ordered_halving 1/2, so the windows start at frame 5 and wrap
    assert windows("looped_uniform", 10, 4, 1, step=1) == [[5, 6, 7, 8], [8, 9, 0, 1], [1, 2, 3, 4]]


def test_uniform_stride_adds_windows_of_frames_two_apart():
    # 16 frames, length 4: strides 1 and 2 (log2(16/4) + 1 = 3 levels allowed, stride 2 asked)
    assert windows("looped_uniform", 16, 4, 0, stride=2) == [
        [0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15], [0, 2, 4, 6], [8, 10, 12, 14]]


def test_uniform_standard_slides_wrapping_windows_to_the_end_and_fills_the_start():
    # looped at step 1 gives [5..8], [8, 9, 0, 1], [1..4]; the wrapping window slides to [6..9]
    # and, as the next one lacks frame 0, [0..3] is added after it
    assert windows("standard_uniform", 10, 4, 1, step=1) == [[5, 6, 7, 8], [6, 7, 8, 9], [0, 1, 2, 3], [1, 2, 3, 4]]
    assert windows("standard_uniform", 4, 4, 1, step=1) == [[0, 1, 2, 3]]


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_every_frame_is_in_some_window_and_every_window_in_the_video(schedule):
    for n in range(2, 24):
        for length, overlap, stride, step in ((4, 1, 1, 0), (4, 1, 1, 3), (5, 2, 2, 2), (3, 0, 2, 1), (6, 1, 3, 5)):
            found = windows(schedule, n, length, overlap, stride, step=step)
            assert get_missing_indexes(found, n) == [], (n, length, overlap, stride, step, found)
            assert all(0 <= i < n for w in found for i in w), (n, length, overlap, stride, step, found)


def test_uniform_standard_drops_strided_windows_wider_than_the_video_and_covers_what_they_held():
    # ComfyUI gives [[0, 1, 2], [1, 2, 3], [3, 5, 3]] (frame 5 of 4) here
    assert windows("standard_uniform", 4, 3, 0, stride=2) == [[0, 1, 2], [1, 2, 3]]
    # ComfyUI leaves frame 1 in no window here (0/0 there): a window starting at it is added
    assert windows("standard_uniform", 11, 5, 2, stride=2, step=2) == [
        [3, 4, 5, 6, 7], [6, 7, 8, 9, 10], [2, 4, 6, 8, 10], [0, 2, 4, 6, 8], [1, 2, 3, 4, 5]]


# --- fuse weights ---

def test_pyramid_rises_to_the_middle_and_falls_back():
    h = context_handler("standard_static", "pyramid", 5, 1)
    assert list(get_context_weights(5, 20, list(range(5)), h)) == [1, 2, 3, 2, 1]
    assert list(get_context_weights(4, 20, list(range(4)), h)) == [1, 2, 2, 1]
    assert list(get_context_weights(1, 20, [3], h)) == [1]


def test_flat_weights_are_ones():
    h = context_handler("standard_static", "flat", 3, 1)
    assert list(get_context_weights(3, 9, [0, 1, 2], h)) == [1.0, 1.0, 1.0]


def test_overlap_linear_ramps_only_inner_edges_and_neighbours_sum_to_one():
    h = context_handler("standard_static", "overlap-linear", 6, 3)
    first = get_context_weights(6, 12, list(range(0, 6)), h)
    middle = get_context_weights(6, 12, list(range(3, 9)), h)
    last = get_context_weights(6, 12, list(range(6, 12)), h)
    assert torch.allclose(first, torch.tensor([1, 1, 1, 1, 0.5, 0]))
    assert torch.allclose(middle, torch.tensor([0, 0.5, 1, 1, 0.5, 0]))
    assert torch.allclose(last, torch.tensor([0, 0.5, 1, 1, 1, 1]))
    assert (middle > 0).all()  # the ramps end at 1e-37: no frame's weight is exactly 0
    total = torch.zeros(12)
    total[0:6] += first
    total[3:9] += middle
    total[6:12] += last
    assert torch.allclose(total, torch.ones(12))


def test_overlap_linear_without_overlap_is_flat_and_a_short_window_takes_what_fits():
    h = context_handler("batched", "overlap-linear", 4, 0)
    assert torch.equal(get_context_weights(4, 12, [4, 5, 6, 7], h), torch.ones(4))
    h = context_handler("batched", "overlap-linear", 4, 2)
    assert torch.allclose(get_context_weights(1, 9, [8], h), torch.zeros(1))  # the ramp up to 1, cut to 1 frame


@pytest.mark.parametrize("fuse", ["pyramid", "flat", "overlap-linear"])
def test_fused_weights_are_the_sum_over_the_windows_covering_each_frame(fuse):
    # 11 frames, length 4, overlap 1: windows [0..3], [3..6], [6..9], [7..10]
    h = context_handler("standard_static", fuse, 4, 1)
    seen = []
    add_callback_with_key(IndexListCallbacks.COMBINE_CONTEXT_WINDOW_RESULTS, "t",
                          lambda _h, x, out, sub, window, i, total, t, final, counts, biases:
                          seen.append(counts[0].flatten().clone()), h.callbacks)
    x = torch.randn(1, 2, 11, 2, 2)
    h.dim = 2
    h.execute(lambda m, c, sx, s, o: [torch.ones_like(sx)], None, [[{}]], x, SIGMAS[:1], _options())
    expected = torch.zeros(11)
    for w in ([0, 1, 2, 3], [3, 4, 5, 6], [6, 7, 8, 9], [7, 8, 9, 10]):
        expected[w] += torch.as_tensor(get_context_weights(4, 11, w, h), dtype=torch.float32)
    assert torch.allclose(seen[-1], expected)


# --- the handler in calc_cond_batch ---

def _options() -> dict:
    return {"transformer_options": {"sample_sigmas": SIGMAS}}


class PerFrameModel:
    """A model whose output at each frame depends only on that frame's input, sigma and conds
    (so windowing cannot change it); records what each call saw."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.calls: list[dict] = []

    def apply_model(self, x, sigma, c_crossattn=None, c_concat=None, transformer_options=None, **kw):
        self.calls.append({"x": x.shape, "c_concat": c_concat, "c_crossattn": c_crossattn, "sigma": sigma,
                           "window": (transformer_options or {}).get(CONTEXT_WINDOW_OPTION), **kw})
        s = sigma.reshape([-1] + [1] * (x.ndim - 1))
        out = torch.sin(x) * 0.5 + x / (1 + s * s) + c_crossattn.mean()
        if c_concat is not None:
            out = out + 2.0 * c_concat.mean(dim=1, keepdim=True)
        return out


def _video_conds(frames: int, *, channels: int = 3) -> list[list[dict]]:
    torch.manual_seed(1)
    concat = torch.randn(1, channels, frames, 2, 3)
    pos = [{"model_conds": {"c_crossattn": torch.randn(1, 5, 8), "c_concat": concat}}]
    neg = [{"model_conds": {"c_crossattn": torch.randn(1, 5, 8), "c_concat": concat * 0.5}}]
    return [pos, neg]


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("fuse", ContextFuseMethods.LIST_STATIC)
def test_windows_leave_a_per_frame_model_exact_on_a_5d_latent(schedule, fuse):
    x = torch.randn(1, 4, 13, 2, 3)  # [B, C, T, h, w]
    sigma = SIGMAS[1:2]
    conds = _video_conds(13)
    plain = calc_cond_batch(PerFrameModel(2), conds, x, sigma, _options())
    opts = _options()
    opts["context_handler"] = context_handler(schedule, fuse, 5, 2, dim=2)
    model = PerFrameModel(2)
    windowed = calc_cond_batch(model, conds, x, sigma, opts)
    assert len(model.calls) > 1
    for a, b in zip(plain, windowed):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("fuse", ContextFuseMethods.LIST_STATIC)
def test_windows_leave_a_per_frame_model_exact_on_batch_as_frames(schedule, fuse):
    x = torch.randn(12, 4, 3, 3)  # 12 frames as the batch (AnimateDiff)
    sigma = SIGMAS[2:3].repeat(12)
    per_frame_concat = torch.randn(12, 2, 3, 3)
    conds = [[{"model_conds": {"c_crossattn": torch.randn(1, 5, 8), "c_concat": per_frame_concat}}], None]
    plain = calc_cond_batch(PerFrameModel(0), conds, x, sigma, _options())
    opts = _options()
    opts["context_handler"] = context_handler(schedule, fuse, 4, 1, dim=0)
    model = PerFrameModel(0)
    windowed = calc_cond_batch(model, conds, x, sigma, opts)
    assert len(model.calls) > 1
    assert torch.allclose(plain[0], windowed[0], atol=1e-5, rtol=1e-5)
    assert torch.equal(windowed[1], torch.zeros_like(x))  # a skipped list stays 0, as without windows


def test_a_model_sees_only_windows_of_the_given_length_with_their_conds_sliced():
    x = torch.randn(1, 4, 11, 2, 3)
    conds = _video_conds(11)
    full_concat = conds[0][0]["model_conds"]["c_concat"]
    opts = _options()
    # without today's causal fix frame (tests/nodes/test_context_windows_2026.py has it)
    opts["context_handler"] = context_handler("standard_static", "pyramid", 4, 1, dim=2, causal_window_fix=False)
    model = PerFrameModel(2)
    calc_cond_batch(model, conds, x, SIGMAS[:1], opts)
    expected = [[0, 1, 2, 3], [3, 4, 5, 6], [6, 7, 8, 9], [7, 8, 9, 10]]
    assert [c["window"].index_list for c in model.calls] == expected
    for call, frames in zip(model.calls, expected):
        assert call["x"] == (2, 4, 4, 2, 3)  # cond and uncond in one batch, 4 frames
        assert torch.equal(call["c_concat"][1:], full_concat[:, :, frames])  # the positive row (batch order: neg first)
        assert call["c_crossattn"].shape == (2, 5, 8)  # no frame axis: whole
    assert CONTEXT_WINDOW_OPTION not in opts["transformer_options"]  # the last window is not left behind


def test_batch_as_frames_slices_the_timestep_per_frame_conds_and_masks():
    x = torch.randn(8, 4, 2, 2)
    sigma = torch.linspace(3.0, 3.7, 8)
    frame_ctx = torch.randn(8, 5, 8)
    mask = torch.rand(8, 2, 2)
    conds = [[{"model_conds": {"c_crossattn": frame_ctx, "num_video_frames": 8}, "mask": mask}]]
    opts = {"transformer_options": {"sample_sigmas": torch.tensor([3.0, 0.0])},
            "context_handler": context_handler("batched", "flat", 3, 0, dim=0, causal_window_fix=False)}
    model = PerFrameModel(0)
    calc_cond_batch(model, conds, x, sigma, opts)
    assert [c["x"][0] for c in model.calls] == [3, 3, 2]
    for call, frames in zip(model.calls, ([0, 1, 2], [3, 4, 5], [6, 7])):
        assert torch.equal(call["sigma"], sigma[frames])
        assert torch.equal(call["c_crossattn"], frame_ctx[frames])
        assert call["num_video_frames"] == len(frames)


def test_no_windows_when_the_latent_fits_in_one():
    x = torch.randn(1, 4, 5, 2, 3)
    opts = _options()
    opts["context_handler"] = context_handler("standard_static", "pyramid", 5, 2, dim=2)
    model = PerFrameModel(2)
    calc_cond_batch(model, _video_conds(5), x, SIGMAS[:1], opts)
    assert len(model.calls) == 1 and model.calls[0]["window"] is None


def test_uniform_windows_move_with_the_sampling_step_and_midpoint_sigmas_use_the_step_before():
    h = context_handler("looped_uniform", "flat", 4, 1, dim=2)
    x = torch.randn(1, 2, 10, 1, 1)
    seen = []

    def run(m, conds, sx, s, o):
        seen.append(o["transformer_options"][CONTEXT_WINDOW_OPTION].index_list)
        return [sx]

    h.execute(run, None, [None], x, SIGMAS[0:1], _options())
    assert h._step == 0 and seen[0] == [0, 1, 2, 3]
    seen.clear()
    h.execute(run, None, [None], x, SIGMAS[1:2], _options())
    assert h._step == 1 and seen[0] == [5, 6, 7, 8]
    h.execute(run, None, [None], x, torch.tensor([5.0]), _options())  # between steps 1 and 2
    assert h._step == 1


def test_callbacks_run_at_their_points():
    h = context_handler("standard_static", "flat", 4, 1, dim=2)
    events = []
    for kind in (IndexListCallbacks.EXECUTE_START, IndexListCallbacks.EVALUATE_CONTEXT_WINDOWS,
                 IndexListCallbacks.COMBINE_CONTEXT_WINDOW_RESULTS, IndexListCallbacks.EXECUTE_CLEANUP):
        add_callback_with_key(kind, "t", lambda *a, kind=kind: events.append(kind), h.callbacks)
    h.execute(lambda m, c, sx, s, o: [sx], None, [None], torch.randn(1, 2, 10, 1, 1), SIGMAS[:1], _options())
    assert events == (["execute_start"] + ["evaluate_context_windows", "combine_context_window_results"] * 3
                      + ["execute_cleanup"])


def test_a_window_that_raises_still_runs_the_cleanup_and_restores_the_options():
    h = context_handler("standard_static", "flat", 4, 1, dim=2)
    cleaned = []
    add_callback_with_key(IndexListCallbacks.EXECUTE_CLEANUP, "t", lambda *a: cleaned.append(1), h.callbacks)
    opts = _options()

    def fail(*_):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        h.execute(fail, None, [None], torch.randn(1, 2, 10, 1, 1), SIGMAS[:1], opts)
    assert cleaned == [1] and CONTEXT_WINDOW_OPTION not in opts["transformer_options"]


def test_prepare_sampling_wrapper_plans_memory_for_one_window():
    h = context_handler("standard_static", "flat", 4, 1, dim=2)
    got = _prepare_sampling_wrapper(lambda m, shape, *a, **k: shape, None, (1, 16, 21, 60, 104), None,
                                    model_options={"context_handler": h})
    assert got == [1, 16, 4, 60, 104]
    with pytest.raises(ContextWindowError):
        _prepare_sampling_wrapper(lambda *a, **k: None, None, (1, 16, 21, 60, 104))


def test_bad_settings_are_typed_errors():
    with pytest.raises(ContextWindowError, match="context_schedule"):
        context_handler("spiral", "flat", 4, 1)
    with pytest.raises(ContextWindowError, match="fuse_method"):
        context_handler("batched", "average", 4, 1)
    with pytest.raises(ContextWindowError, match="context_overlap"):
        context_handler("standard_static", "flat", 4, 4)
    with pytest.raises(ContextWindowError, match="context_length"):
        context_handler("batched", "flat", 0, 0)
    h = context_handler("standard_static", "flat", 4, 1, dim=4)
    with pytest.raises(ContextWindowError, match="dim 4"):
        h.should_use_context(None, [], torch.zeros(8, 4, 2, 2), SIGMAS[:1], {})
    h = context_handler("standard_static", "flat", 4, 1, dim=0)
    with pytest.raises(ContextWindowError, match="sample_sigmas"):
        h.execute(lambda *a: [a[2]], None, [None], torch.zeros(8, 4, 2, 2), SIGMAS[:1], {})
