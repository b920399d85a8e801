"""comfy_core.memory_plan: VRAM modes from flags, weights budgets, partial-load plans, OOM fallback."""
from __future__ import annotations

import pytest

from comfy_core.memory_plan import (DEFAULT_EXTRA_RESERVE, GiB, INFERENCE_RESERVE, MIN_PARTIAL_WEIGHTS, ModuleCost,
                                    VramMode, fallback_mode, mode_from_flags, plan_partial_load, reserve_bytes,
                                    weights_budget)


def test_modes_from_flags_follow_comfyui_precedence():
    assert mode_from_flags("cpu", lowvram=True, gpu_only=True) == VramMode.DISABLED
    assert mode_from_flags("mps", novram=True) == VramMode.SHARED
    assert mode_from_flags("cuda") == VramMode.NORMAL
    assert mode_from_flags("cuda", normalvram=True) == VramMode.NORMAL
    assert mode_from_flags("cuda", highvram=True) == VramMode.HIGH
    assert mode_from_flags("cuda", gpu_only=True) == VramMode.GPU_ONLY
    assert mode_from_flags("cuda", novram=True) == VramMode.NO
    assert mode_from_flags("cuda", lowvram=True, novram=True, highvram=True) == VramMode.LOW
    assert mode_from_flags("cuda", novram=True, highvram=True) == VramMode.NO


def test_mode_names_and_comfy_states():
    assert VramMode.of("--lowvram") is VramMode.LOW
    assert VramMode.of("gpu-only") is VramMode.GPU_ONLY
    assert VramMode.GPU_ONLY.comfy_state_name == "HIGH_VRAM"
    assert VramMode.NO.comfy_state_name == "NO_VRAM"
    assert VramMode.LOW.text_encoders_on_cpu and VramMode.NO.text_encoders_on_cpu
    assert not VramMode.NORMAL.text_encoders_on_cpu
    with pytest.raises(ValueError, match="unknown VRAM mode"):
        VramMode.of("tinyvram")


def test_reserve_is_inference_memory_plus_comfyui_extra():
    assert reserve_bytes() == INFERENCE_RESERVE + DEFAULT_EXTRA_RESERVE
    assert reserve_bytes(2.0) == INFERENCE_RESERVE + 2 * GiB  # --reserve-vram replaces the 400 MiB
    assert reserve_bytes(0) == INFERENCE_RESERVE


@pytest.mark.parametrize("mode", [VramMode.GPU_ONLY, VramMode.HIGH, VramMode.DISABLED, VramMode.SHARED])
def test_full_load_modes_never_load_in_part(mode):
    assert weights_budget(mode, model_bytes=10 * GiB, room=1 * GiB) is None


def test_normal_and_low_load_whole_what_fits_else_the_room_with_comfyui_floor():
    for mode in (VramMode.NORMAL, VramMode.LOW):
        assert weights_budget(mode, 100, room=100) is None
        assert weights_budget(mode, 100, room=None) is None
        assert weights_budget(mode, 5 * GiB, room=2 * GiB) == 2 * GiB
        assert weights_budget(mode, 5 * GiB, room=0) == MIN_PARTIAL_WEIGHTS
        assert weights_budget(mode, 100, room=10) is None  # under the 128 MiB floor: whole
        assert weights_budget(mode, 100, room=10, floor=0) == 10


def test_novram_streams_everything():
    assert weights_budget(VramMode.NO, 100, room=None) == 0
    assert weights_budget(VramMode.NO, 100, room=10 ** 12) == 0


def test_plan_is_largest_first_greedy_and_smaller_modules_fill_in():
    modules = [ModuleCost("a", 40), ModuleCost("b", 70), ModuleCost("c", 20), ModuleCost("d", 10)]
    plan = plan_partial_load(modules, budget=95)
    # b (70) fits; a (40) would make 110: streamed; c (20) makes 90; d (10) would make 100: streamed
    assert plan.resident == ("b", "c")
    assert plan.streamed == ("a", "d")
    assert (plan.resident_bytes, plan.streamed_bytes, plan.total_bytes) == (90, 50, 140)
    assert not plan.full


def test_plan_without_budget_is_whole_and_zero_budget_streams_all_streamable():
    modules = [ModuleCost("a", 40), ModuleCost("pos", 8, streamable=False)]
    assert plan_partial_load(modules, None).full
    plan = plan_partial_load(modules, 0)
    assert plan.resident == ("pos",) and plan.streamed == ("a",)
    assert plan.resident_bytes == 8


def test_unstreamable_modules_are_resident_and_counted_first():
    modules = [ModuleCost("big", 60), ModuleCost("pinned", 50, streamable=False), ModuleCost("small", 5)]
    plan = plan_partial_load(modules, budget=100)
    assert plan.resident == ("pinned", "small")  # 50 forced, big (60) no longer fits, small does
    assert plan.streamed == ("big",)


def test_equal_sizes_are_ordered_by_name():
    modules = [ModuleCost("z", 10), ModuleCost("a", 10), ModuleCost("m", 10)]
    assert plan_partial_load(modules, budget=15).resident == ("a",)


def test_out_of_memory_fallback_ladder():
    assert fallback_mode(VramMode.HIGH) is VramMode.NORMAL
    assert fallback_mode(VramMode.NORMAL) is VramMode.NO
    assert fallback_mode(VramMode.LOW) is VramMode.NO
    assert fallback_mode(VramMode.NO) is VramMode.NO
    assert fallback_mode(VramMode.GPU_ONLY) is VramMode.GPU_ONLY
    assert fallback_mode(VramMode.DISABLED) is VramMode.DISABLED
