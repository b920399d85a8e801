"""webui step schedules -> ComfyUI `start_percent` / `end_percent` ranges.

webui's CFG denoiser counts model calls from 0 and, for a schedule `[[t1, A], [t2, B], ...]`,
uses the first entry whose end step `t >= call` (reference section 0.6): A for calls `0..t1`,
B for `t1+1..t2`, and so on. ComfyUI's sampler uses an entry while
`percent_to_sigma(end_percent) <= sigma <= percent_to_sigma(start_percent)`.

For a first-order sampler call `i` runs at `sigmas[i]`, so the switch after call `t` must fall
strictly between `sigmas[t]` and `sigmas[t + 1]` of the sampler's own schedule. We place it at
their geometric mean (the middle in log-sigma, the space `ModelSampling.sigma` interpolates in)
and invert `percent_to_sigma` exactly. The result depends on the step count and the scheduler, so
both are inputs of the node. A switch after the last real sigma (`t >= steps - 1`) is percent 1.0:
that entry never runs, as in webui. Second-order samplers (webui doubles their step count) switch
at the sigma a first-order sampler would.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch

from comfy_core.models.model_sampling import ModelSampling
from comfy_core.sampling.schedulers import calculate_sigmas


def sigma_to_percent(model_sampling: ModelSampling, sigma: float) -> float:
    """The percent `p` with `model_sampling.percent_to_sigma(p) == sigma` (inverse of ComfyUI's map).

    `percent_to_sigma(p)` is `sigma(t)` at `t = (1 - p) * 999`, log-linear between table entries;
    sigmas outside the table clamp to its ends.
    """
    log_sigmas = model_sampling.log_sigmas.double()  # [T], ascending
    target = math.log(sigma)
    last = log_sigmas.shape[0] - 1
    if target <= log_sigmas[0]:
        t = 0.0
    elif target >= log_sigmas[-1]:
        t = float(last)
    else:
        high = int(torch.searchsorted(log_sigmas, torch.tensor([target], dtype=torch.float64))[0])
        low = high - 1
        t = low + (target - float(log_sigmas[low])) / float(log_sigmas[high] - log_sigmas[low])
    return 1.0 - t / 999.0


def switch_percents(switch_steps: Sequence[int], sigmas: torch.Tensor, model_sampling: ModelSampling) -> list[float]:
    """For each webui switch step `t` (last call of the old text), the percent that switches there."""
    real = sigmas.shape[0] - 1  # sigmas ends with the final 0 (or sigma_min) after the last step
    percents = []
    for t in switch_steps:
        if t < 0:
            percents.append(0.0)
        elif t + 1 >= real:
            percents.append(1.0)
        else:
            middle = math.sqrt(float(sigmas[t]) * float(sigmas[t + 1]))
            percents.append(sigma_to_percent(model_sampling, middle))
    return percents


def schedule_ranges(end_steps: Sequence[int], steps: int, scheduler: str = "normal",
                    model_sampling: ModelSampling | None = None) -> list[tuple[float, float]]:
    """`(start_percent, end_percent)` for each entry of one webui schedule (its `end_step`s).

    `model_sampling` defaults to the scaled-linear table SD1.x, SD2.x and SDXL share.
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    model_sampling = model_sampling or ModelSampling()
    sigmas = calculate_sigmas(model_sampling, scheduler, steps)  # [steps + 1]
    bounds = switch_percents(list(end_steps[:-1]), sigmas, model_sampling)
    starts = [0.0, *bounds]
    ends = [*bounds, 1.0]
    return list(zip(starts, ends))
