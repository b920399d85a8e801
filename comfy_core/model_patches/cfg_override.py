"""CFG override: a fixed guidance scale over part of the schedule, as a `predict_noise` wrapper.

Behaviour of today's ComfyUI `CFGOverride` node (comfy_extras/nodes_custom_sampler.py, 2026),
written here: the start and end percents become sigmas through the model's
`percent_to_sigma` (sigma falls as the percent rises, so `sigma_hi = percent_to_sigma(start)`
and `sigma_lo = percent_to_sigma(end)`). A model call whose sigma (the first element of the
batch's sigmas) lies in the half-open range `sigma_lo < sigma <= sigma_hi` runs with the guider's
`cfg` set to the override, restored afterwards (also on error); other calls run unchanged. With
several overrides on one MODEL the last one added runs innermost, so it sets `cfg` last and wins
where the ranges overlap ("the one nearest the sampler wins").

Whatever reads the guider's `cfg` during the call sees the override: CFG itself, the cfg-1 skip of
the negative pass (`cfg == 1` in range: the negative is not evaluated), and the guiders beside
`CFGGuider` that take a single `cfg` (DualModelGuider).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


class CFGOverrideError(ValueError):
    """A CFG override asked for with a range the model's schedule cannot express."""


def override_sigma_range(model_sampling: Any, start_percent: float, end_percent: float) -> tuple[float, float]:
    """`(sigma_lo, sigma_hi)` of the override window: the sigmas at `end_percent` and at
    `start_percent` of the model's schedule (its `percent_to_sigma`)."""
    for name, value in (("start_percent", start_percent), ("end_percent", end_percent)):
        if not 0.0 <= float(value) <= 1.0:
            raise CFGOverrideError(f"{name} must be within 0..1, got {value!r}")
    sigma_hi = float(model_sampling.percent_to_sigma(float(start_percent)))
    sigma_lo = float(model_sampling.percent_to_sigma(float(end_percent)))
    return sigma_lo, sigma_hi


def in_override_range(sigma: float, sigma_lo: float, sigma_hi: float) -> bool:
    """Whether a model call at `sigma` is inside the window `sigma_lo < sigma <= sigma_hi`."""
    return sigma_lo < sigma <= sigma_hi


@dataclass(frozen=True)
class CFGOverride:
    """`predict_noise` wrapper `(executor, x, timestep, model_options, seed)`: the guider
    (`executor.class_obj`) runs with `cfg` while its call's sigma is in range."""

    cfg: float
    sigma_lo: float
    sigma_hi: float

    def __call__(self, executor: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        sigma = float(args[1].flatten()[0])  # args: (x, timestep, model_options, seed)
        if not in_override_range(sigma, self.sigma_lo, self.sigma_hi):
            return executor(*args, **kwargs)
        guider = executor.class_obj
        saved = guider.cfg
        guider.cfg = self.cfg
        try:
            return executor(*args, **kwargs)
        finally:
            guider.cfg = saved

    def cache_signature(self) -> tuple:
        return ("CFGOverride", self.cfg, self.sigma_lo, self.sigma_hi)
