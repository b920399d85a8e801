"""Noise schedules: the sigma sequence a sampler walks down, by ComfyUI scheduler name.

Every function returns a float32 CPU tensor of `steps + 1` sigmas ending in 0 (except where a
docstring says otherwise, because ComfyUI's formula does). Names, formulas and edge cases follow
ComfyUI's `comfy/samplers.py` and k-diffusion's `get_sigmas_*` (Karras et al. 2022); the facts
are in `shared/reference/samplers.md` section 3. Written here from those descriptions.

`calculate_sigmas(model_sampling, name, steps)` dispatches by name; `SCHEDULER_NAMES` keeps
ComfyUI's current order (its first entry is the KSampler fallback).
"""
from __future__ import annotations

import math
from types import MappingProxyType
from typing import Callable, Mapping, NamedTuple

import numpy as np
import torch

from comfy_core import extension_points
from comfy_core.models.model_sampling import ModelSampling
from comfy_core.sampling.scheduler_names import SCHEDULER_NAMES  # torch-free, for the node layer


class UnknownSchedulerError(ValueError):
    """A scheduler name that is not in `SCHEDULER_NAMES`."""


def _append_zero(sigmas: torch.Tensor) -> torch.Tensor:
    return torch.cat([sigmas, sigmas.new_zeros([1])])


# -- schedules from (n, sigma_min, sigma_max) --------------------------------------------------

def get_sigmas_karras(n: int, sigma_min: float, sigma_max: float, rho: float = 7.0,
                      device: str | torch.device = "cpu") -> torch.Tensor:
    """Karras et al. 2022, eq. 5: `(max^(1/rho) + i/(n-1) (min^(1/rho) - max^(1/rho)))^rho`, then 0."""
    ramp = torch.linspace(0, 1, n, device=device)  # [n]
    min_inv_rho = sigma_min ** (1 / rho)
    max_inv_rho = sigma_max ** (1 / rho)
    sigmas = (max_inv_rho + ramp * (min_inv_rho - max_inv_rho)) ** rho
    return _append_zero(sigmas).to(device)


def get_sigmas_exponential(n: int, sigma_min: float, sigma_max: float,
                           device: str | torch.device = "cpu") -> torch.Tensor:
    """Sigmas evenly spaced in log-sigma from sigma_max to sigma_min, then 0 (k-diffusion)."""
    sigmas = torch.linspace(math.log(sigma_max), math.log(sigma_min), n, device=device).exp()
    return _append_zero(sigmas)


def get_sigmas_polyexponential(n: int, sigma_min: float, sigma_max: float, rho: float = 1.0,
                               device: str | torch.device = "cpu") -> torch.Tensor:
    """A polynomial in log sigma (k-diffusion); rho=1 is `exponential`."""
    ramp = torch.linspace(1, 0, n, device=device) ** rho
    sigmas = torch.exp(ramp * (math.log(sigma_max) - math.log(sigma_min)) + math.log(sigma_min))
    return _append_zero(sigmas)


def kl_optimal(n: int, sigma_min: float, sigma_max: float) -> torch.Tensor:
    """"Align Your Steps"-style KL-optimal schedule (Sabour et al. 2024, "Align Your Steps", eq. 12).

    `tan(w atan(sigma_min) + (1-w) atan(sigma_max))` for w = i/(n-1), then 0. As in ComfyUI,
    n = 1 gives NaN (0/0); we keep that rather than invent a value.
    """
    w = torch.arange(n, dtype=torch.float).div_(n - 1)  # [n]
    sigmas = w.new_zeros(n + 1)
    sigmas[:-1] = (w * math.atan(sigma_min) + (1 - w) * math.atan(sigma_max)).tan_()
    return sigmas


# -- schedules that read the model's sigma table -----------------------------------------------

def simple(model_sampling: ModelSampling, steps: int) -> torch.Tensor:
    """Every `T/steps`-th entry of the table from the top: `table[-(1 + int(i*T/steps))]`, then 0."""
    table = model_sampling.sigmas
    stride = len(table) / steps
    sigs = [float(table[-(1 + int(i * stride))]) for i in range(steps)]
    return torch.FloatTensor(sigs + [0.0])


def ddim_uniform(model_sampling: ModelSampling, steps: int) -> torch.Tensor:
    """DDIM's uniform timestep skip (Song et al. 2021): table[1], table[1+k], ... reversed, then 0.

    Like ComfyUI it neither starts at sigma_max nor guarantees `steps` steps (n=7 gives 8).
    """
    table = model_sampling.sigmas
    sigs: list[float]
    if math.isclose(float(table[1]), 0, abs_tol=1e-5):
        steps += 1
        sigs = []
    else:
        sigs = [0.0]
    stride = max(len(table) // steps, 1)
    sigs += [float(table[t]) for t in range(1, len(table), stride)]
    return torch.FloatTensor(sigs[::-1])


def _timestep_schedule(model_sampling: ModelSampling, steps: int, sgm: bool) -> torch.Tensor:
    start = model_sampling.timestep(model_sampling.sigma_max)
    end = model_sampling.timestep(model_sampling.sigma_min)
    append_zero = True
    if sgm:
        timesteps = torch.linspace(start, end, steps + 1)[:-1]
    else:
        if math.isclose(float(model_sampling.sigma(end)), 0, abs_tol=1e-5):
            steps += 1
            append_zero = False
        timesteps = torch.linspace(start, end, steps)
    sigs = [float(model_sampling.sigma(t)) for t in timesteps]
    return torch.FloatTensor(sigs + ([0.0] if append_zero else []))


def normal(model_sampling: ModelSampling, steps: int) -> torch.Tensor:
    """Timesteps evenly spaced from T-1 to 0, mapped to sigma (k-diffusion's DiscreteSchedule), then 0."""
    return _timestep_schedule(model_sampling, steps, sgm=False)


def sgm_uniform(model_sampling: ModelSampling, steps: int) -> torch.Tensor:
    """`steps + 1` evenly spaced timesteps with the last dropped (Stability's sgm), then 0."""
    return _timestep_schedule(model_sampling, steps, sgm=True)


def beta(model_sampling: ModelSampling, steps: int, alpha: float = 0.6, beta_: float = 0.6) -> torch.Tensor:
    """Beta-distribution timesteps (Lee et al. 2024, "Beta Sampling is All You Need", arXiv 2407.12173).

    Timesteps `rint(ppf_Beta(1 - i/n) * (T-1))`; a repeated timestep is skipped, so it may return
    fewer than `steps` steps (n=200 gives 199), as ComfyUI does.
    """
    from scipy import stats  # scipy ships with the environment; imported lazily (heavy)

    total = len(model_sampling.sigmas) - 1
    ts = 1 - np.linspace(0, 1, steps, endpoint=False)
    ts = np.rint(stats.beta.ppf(ts, alpha, beta_) * total)
    sigs: list[float] = []
    last = -1.0
    for t in ts:
        if t != last:
            sigs.append(float(model_sampling.sigmas[int(t)]))
        last = t
    return torch.FloatTensor(sigs + [0.0])


def linear_quadratic(model_sampling: ModelSampling, steps: int, threshold_noise: float = 0.025,
                     linear_steps: int | None = None) -> torch.Tensor:
    """Genmo Mochi's linear-then-quadratic schedule on [0, 1], flipped and scaled by sigma_max.

    Source: genmoai/models `infer.py` (as used by ComfyUI). Not tied to the table, so the last
    non-zero sigma can be large.
    """
    if steps == 1:
        schedule = [1.0, 0.0]
    else:
        if linear_steps is None:
            linear_steps = steps // 2
        linear = [i * threshold_noise / linear_steps for i in range(linear_steps)]
        step_diff = linear_steps - threshold_noise * steps
        quadratic_steps = steps - linear_steps
        quad_coef = step_diff / (linear_steps * quadratic_steps ** 2)
        lin_coef = threshold_noise / linear_steps - 2 * step_diff / (quadratic_steps ** 2)
        const = quad_coef * (linear_steps ** 2)
        quadratic = [quad_coef * (i ** 2) + lin_coef * i + const for i in range(linear_steps, steps)]
        schedule = [1.0 - v for v in linear + quadratic + [1.0]]
    return torch.FloatTensor(schedule) * model_sampling.sigma_max.cpu()


# -- dispatch ----------------------------------------------------------------------------------

class SchedulerHandler(NamedTuple):
    """A schedule function; `use_ms` says it takes `(model_sampling, steps)` rather than `(n, min, max)`."""
    handler: Callable[..., torch.Tensor]
    use_ms: bool = True


# Name -> handler, in ComfyUI's order: ours. A host adds or replaces schedules through its
# extension points (`scheduler_handlers`, where compat puts a pack's
# `comfy.samplers.SCHEDULER_HANDLERS[name] = SchedulerHandler(fn)`); read-only here.
SCHEDULER_HANDLERS: Mapping[str, SchedulerHandler] = MappingProxyType({
    "simple": SchedulerHandler(simple),
    "sgm_uniform": SchedulerHandler(sgm_uniform),
    "karras": SchedulerHandler(get_sigmas_karras, use_ms=False),
    "exponential": SchedulerHandler(get_sigmas_exponential, use_ms=False),
    "ddim_uniform": SchedulerHandler(ddim_uniform),
    "beta": SchedulerHandler(beta),
    "normal": SchedulerHandler(normal),
    "linear_quadratic": SchedulerHandler(linear_quadratic),
    "kl_optimal": SchedulerHandler(kl_optimal, use_ms=False),
})


def scheduler_handlers() -> dict[str, SchedulerHandler]:
    """Name -> handler as a run sees it: ours, then the host's additions and replacements (a new
    dict: callers may extend their copy)."""
    return {**SCHEDULER_HANDLERS, **extension_points.current().scheduler_handlers}


def calculate_sigmas(model_sampling: ModelSampling, scheduler_name: str, steps: int) -> torch.Tensor:
    """The schedule `scheduler_name` for `steps` steps on this model's sigma table."""
    handlers = scheduler_handlers()
    handler = handlers.get(scheduler_name)
    if handler is None:
        raise UnknownSchedulerError(
            f"unknown scheduler {scheduler_name!r}; expected one of {', '.join(handlers)} "
            "(a node pack adds one with comfy.samplers.SCHEDULER_HANDLERS[name] = SchedulerHandler(fn))")
    if steps < 1:
        raise ValueError(f"scheduler {scheduler_name!r}: steps must be >= 1, got {steps}")
    if handler.use_ms:
        return handler.handler(model_sampling, steps)
    return handler.handler(n=steps, sigma_min=float(model_sampling.sigma_min),
                           sigma_max=float(model_sampling.sigma_max))
