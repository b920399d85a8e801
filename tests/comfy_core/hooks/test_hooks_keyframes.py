"""Keyframes: sorting, interpolation, the per-run cursor (ComfyUI's prepare_current_keyframe with
guaranteed steps) and CLIP schedules (ComfyUI's get_hooks_for_clip_schedule), checked against
hand-worked sequences."""
from __future__ import annotations

import math

import pytest
import torch

from comfy_core.hooks import HookGroup, HookKeyframe, HookKeyframeGroup, WeightHook
from comfy_core.hooks.cursor import KeyframeCursor
from comfy_core.hooks.keyframes import interpolate, keyframes_over_range
from comfy_core.hooks.schedule import clip_schedule


class TenSigmas:
    """percent p -> sigma 10 (1 - p), with ComfyUI's ends (0 -> 999999999.9, 1 -> 0)."""

    def percent_to_sigma(self, p: float) -> float:
        if p <= 0.0:
            return 999999999.9
        if p >= 1.0:
            return 0.0
        return 10.0 * (1.0 - p)


SIGMAS = torch.tensor([10.0, 7.5, 5.0, 2.5, 0.0])


def strengths(keyframes: list[HookKeyframe]) -> list[float]:
    cursor = KeyframeCursor(HookKeyframeGroup(keyframes), TenSigmas())
    out = []
    for sigma in SIGMAS[:-1]:
        cursor.step(sigma, SIGMAS)
        out.append(cursor.strength)
    return out


def test_a_keyframe_takes_over_at_the_first_step_at_or_below_its_sigma():
    assert strengths([HookKeyframe(1.0, 0.0), HookKeyframe(0.5, 0.5)]) == [1.0, 1.0, 0.5, 0.5]


def test_guaranteed_steps_hold_a_keyframe_and_count_only_inside_the_run():
    # kf0 (sigma 9, inside the run) guarantees 3 steps: the 0.25 keyframe waits for step 4.
    assert strengths([HookKeyframe(1.0, 0.1, 3), HookKeyframe(0.5, 0.25)]) == [1.0, 1.0, 1.0, 0.5]
    assert strengths([HookKeyframe(1.0, 0.1, 1), HookKeyframe(0.5, 0.25)]) == [1.0, 0.5, 0.5, 0.5]
    # A keyframe starting before the run's first sigma guarantees nothing.
    assert strengths([HookKeyframe(1.0, 0.0, 3), HookKeyframe(0.5, 0.25)]) == [1.0, 0.5, 0.5, 0.5]


def test_keyframes_without_guaranteed_steps_are_passed_over_in_one_step():
    kfs = [HookKeyframe(1.0, 0.0), HookKeyframe(0.8, 0.1, 0), HookKeyframe(0.6, 0.2, 0), HookKeyframe(0.4, 0.6, 0)]
    assert strengths(kfs) == [1.0, 0.6, 0.6, 0.4]


def test_the_first_keyframe_applies_before_it_starts_and_no_keyframes_is_strength_one():
    assert strengths([HookKeyframe(0.3, 0.9)]) == [0.3] * 4
    assert strengths([]) == [1.0] * 4


def test_a_second_evaluation_at_the_same_sigma_does_not_advance():
    cursor = KeyframeCursor(HookKeyframeGroup([HookKeyframe(1.0, 0.1, 2), HookKeyframe(0.5, 0.2)]), TenSigmas())
    cursor.step(SIGMAS[0], SIGMAS)
    cursor.step(SIGMAS[0], SIGMAS)  # a second model call at one sigma (e.g. a second-order sampler)
    assert cursor.used_steps == 1


def test_keyframes_sort_stably_by_start():
    a, b, c = HookKeyframe(1.0, 0.5), HookKeyframe(2.0, 0.1), HookKeyframe(3.0, 0.5)
    group = HookKeyframeGroup().added(a).added(b).added(c)
    assert group.keyframes == (b, a, c)


@pytest.mark.parametrize("method, curve", [
    ("linear", lambda t: t),
    ("ease_in", lambda t: t * t),
    ("ease_out", lambda t: 1 - (1 - t) ** 2),
    ("ease_in_out", lambda t: (1 - math.cos(math.pi * t)) / 2),
])
def test_interpolation_follows_comfyuis_curves(method, curve):
    got = interpolate(0.2, 1.4, 6, method)
    expected = [0.2 + 1.2 * curve(i / 5) for i in range(6)]
    assert got == pytest.approx(expected, abs=1e-6)


def test_keyframes_over_a_range_guarantee_one_step_on_the_first_only():
    group, pairs = keyframes_over_range([1.0, 0.5, 0.25], 0.2, 0.6)
    assert [k.start_percent for k in group.keyframes] == pytest.approx([0.2, 0.4, 0.6])
    assert [k.strength for k in group.keyframes] == [1.0, 0.5, 0.25]
    assert [k.guarantee_steps for k in group.keyframes] == [1, 0, 0]
    assert [p for p, _ in pairs] == [k.start_percent for k in group.keyframes]


def hook(*keyframes: HookKeyframe) -> WeightHook:
    return WeightHook(1.0, 1.0, lora={}, hook_keyframe=HookKeyframeGroup(keyframes))


def test_clip_schedule_ranges_follow_strength_changes():
    assert clip_schedule(HookGroup([h := hook()])) == [((0.0, 1.0), [(h, None)])]
    k0, k1, k2 = HookKeyframe(1.0, 0.0), HookKeyframe(1.0, 0.5), HookKeyframe(0.3, 0.7)
    h = hook(k0, k1, k2)  # the same strength at 0.5 extends the first range
    assert clip_schedule(HookGroup([h])) == [((0.0, 0.7), [(h, k0)]), ((0.7, 1.0), [(h, k2)])]


def test_clip_schedule_cuts_at_every_hooks_boundaries():
    a0, a1, b0 = HookKeyframe(1.0, 0.0), HookKeyframe(0.5, 0.5), HookKeyframe(2.0, 0.25)
    ha, hb = hook(a0, a1), hook(b0)
    assert clip_schedule(HookGroup([ha, hb])) == [
        ((0.0, 0.25), [(ha, a0), (hb, None)]),
        ((0.25, 0.5), [(ha, a0), (hb, b0)]),
        ((0.5, 1.0), [(ha, a1), (hb, b0)]),
    ]
