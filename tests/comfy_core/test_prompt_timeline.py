"""Step schedules -> start/end percents that switch where webui switches (reference 0.6, 1.3)."""
import pytest

from comfy_core.prompt.timeline import schedule_ranges, sigma_to_percent
from comfy_core.models.model_sampling import ModelSampling
from comfy_core.sampling.schedulers import SCHEDULER_NAMES, calculate_sigmas


def webui_entry(end_steps, call):
    """webui: the first entry whose end step is >= the call counter."""
    return next(i for i, end in enumerate(end_steps) if end >= call)


def comfy_entries(ranges, sigma, ms):
    """ComfyUI: entries whose [percent_to_sigma(end), percent_to_sigma(start)] holds sigma."""
    return [i for i, (start, end) in enumerate(ranges)
            if ms.percent_to_sigma(end) <= sigma <= ms.percent_to_sigma(start)]


def test_sigma_to_percent_inverts_percent_to_sigma():
    ms = ModelSampling()
    for percent in (0.01, 0.2, 0.5, 0.77, 0.99):
        assert sigma_to_percent(ms, ms.percent_to_sigma(percent)) == pytest.approx(percent, abs=1e-5)


@pytest.mark.parametrize("scheduler", SCHEDULER_NAMES)
@pytest.mark.parametrize("steps, end_steps", [
    (10, [3, 10]), (10, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]), (20, [5, 12, 19, 20]), (7, [6, 7]), (12, [11, 12]),
])
def test_every_sampled_sigma_selects_the_webui_entry(scheduler, steps, end_steps):
    ms = ModelSampling()
    ranges = schedule_ranges(end_steps, steps, scheduler)
    sigmas = calculate_sigmas(ms, scheduler, steps)
    for call in range(steps):  # one model call per step (first-order samplers)
        assert comfy_entries(ranges, float(sigmas[call]), ms) == [webui_entry(end_steps, call)], (call, ranges)


def test_ranges_are_contiguous_from_zero_to_one():
    ranges = schedule_ranges([2, 5, 9, 10], 10, "karras")
    assert ranges[0][0] == 0.0 and ranges[-1][1] == 1.0
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))


def test_switch_after_last_call_never_runs():
    # [a:b:9] at 10 steps: webui uses a for calls 0..9, so b's range starts at 1.0
    assert schedule_ranges([9, 10], 10, "normal") == [(0.0, 1.0), (1.0, 1.0)]


def test_single_entry_covers_everything():
    assert schedule_ranges([10], 10) == [(0.0, 1.0)]


def test_bad_steps():
    with pytest.raises(ValueError, match="steps"):
        schedule_ranges([1], 0)
