"""The schedules of ComfyUI's custom-sampling scheduler nodes (SIGMAS: a 1-D float32 tensor).

Formulas after k-diffusion (`get_sigmas_vp`, `get_sigmas_laplace`), comfy_extras/nodes_custom_sampler.py
(BasicScheduler, SDTurboScheduler) and the table-driven schedulers (Align Your Steps, GITS, Optimal
Steps; tables in `schedule_tables.py`), written here from their definitions.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from comfy_core.sampling.schedule_tables import AYS_NOISE_LEVELS, GITS_NOISE_LEVELS, OPTIMAL_STEPS_NOISE_LEVELS
from comfy_core.sampling.schedulers import calculate_sigmas


def _append_zero(sigmas: torch.Tensor) -> torch.Tensor:
    return torch.cat([sigmas, sigmas.new_zeros([1])])


def get_sigmas_vp(n: int, beta_d: float = 19.9, beta_min: float = 0.1, eps_s: float = 1e-3,
                  device: str | torch.device = "cpu") -> torch.Tensor:
    """The continuous VP-SDE schedule (Song et al. 2021): `sqrt(exp(beta_d t^2 / 2 + beta_min t) - 1)`
    for t from 1 to eps_s, then 0."""
    t = torch.linspace(1, eps_s, n, device=device)
    return _append_zero(torch.sqrt(torch.special.expm1(beta_d * t ** 2 / 2 + beta_min * t)))


def get_sigmas_laplace(n: int, sigma_min: float, sigma_max: float, mu: float = 0.0, beta: float = 0.5,
                       device: str | torch.device = "cpu") -> torch.Tensor:
    """Laplace-distributed log-sigmas (Hang et al. 2024, "Improved Noise Schedule for Diffusion
    Training"): the Laplace quantile `mu - beta sign(0.5 - u) log(1 - 2|0.5 - u| + 1e-5)` at n even u
    in [0, 1], exponentiated and clamped to [sigma_min, sigma_max]. No trailing 0 (as k-diffusion)."""
    u = torch.linspace(0, 1, n, device=device)
    lam = mu - beta * torch.sign(0.5 - u) * torch.log(1 - 2 * torch.abs(0.5 - u) + 1e-5)
    return torch.clamp(torch.exp(lam), min=sigma_min, max=sigma_max)


def basic_schedule(model_sampling: Any, scheduler: str, steps: int, denoise: float) -> torch.Tensor:
    """BasicScheduler: the named schedule for `int(steps / denoise)` steps, its last `steps + 1`
    sigmas (empty at denoise <= 0)."""
    total = steps
    if denoise < 1.0:
        if denoise <= 0.0:
            return torch.FloatTensor([])
        total = int(steps / denoise)
    return calculate_sigmas(model_sampling, scheduler, total).cpu()[-(steps + 1):]


def sd_turbo_schedule(model_sampling: Any, steps: int, denoise: float) -> torch.Tensor:
    """SDTurboScheduler: timesteps 999, 899, ..., 99 from index `10 - int(10 denoise)`, `steps` of
    them, as sigmas, then 0."""
    start = 10 - int(10 * denoise)
    timesteps = torch.flip(torch.arange(1, 11) * 100 - 1, (0,))[start:start + steps]
    return _append_zero(model_sampling.sigma(timesteps))


def loglinear_interp(levels: Sequence[float], num_steps: int) -> np.ndarray:
    """Resample a decreasing schedule to `num_steps` points, linearly in log sigma over an even grid
    (the Align Your Steps authors' recipe); float64."""
    xs = np.linspace(0, 1, len(levels))
    ys = np.log(np.asarray(levels)[::-1])
    new_ys = np.interp(np.linspace(0, 1, num_steps), xs, ys)
    return np.exp(new_ys)[::-1].copy()


def _tail_to_zero(levels: Sequence[float] | np.ndarray, total_steps: int) -> torch.Tensor:
    tail = list(levels[-(total_steps + 1):])
    tail[-1] = 0
    return torch.FloatTensor(tail)


def _denoised_steps(steps: int, denoise: float) -> int | None:
    """round(steps * denoise) for the table schedulers; None (empty schedule) at denoise <= 0."""
    if denoise < 1.0:
        if denoise <= 0.0:
            return None
        return round(steps * denoise)
    return steps


def table_schedule(levels: Sequence[float], steps: int, denoise: float) -> torch.Tensor:
    """A published schedule resampled to `steps` (log-linear) unless it has steps + 1 points, its last
    `round(steps * denoise) + 1` sigmas, the final one set to 0 (AYS and Optimal Steps)."""
    total = _denoised_steps(steps, denoise)
    if total is None:
        return torch.FloatTensor([])
    if steps + 1 != len(levels):
        levels = loglinear_interp(levels, steps + 1)
    return _tail_to_zero(levels, total)


def align_your_steps(model_type: str, steps: int, denoise: float) -> torch.Tensor:
    """AlignYourStepsScheduler for "SD1", "SDXL" or "SVD"."""
    return table_schedule(AYS_NOISE_LEVELS[model_type], steps, denoise)


def optimal_steps(model_type: str, steps: int, denoise: float) -> torch.Tensor:
    """OptimalStepsScheduler for "FLUX", "Wan" or "Chroma"."""
    return table_schedule(OPTIMAL_STEPS_NOISE_LEVELS[model_type], steps, denoise)


def gits(coeff: float, steps: int, denoise: float) -> torch.Tensor:
    """GITSScheduler: the published schedule for (coeff rounded to 0.05's grid, steps) up to 20 steps,
    the 20-step one resampled log-linearly beyond."""
    total = _denoised_steps(steps, denoise)
    if total is None:
        return torch.FloatTensor([])
    table = GITS_NOISE_LEVELS[round(coeff, 2)]
    levels: Sequence[float] | np.ndarray
    if steps <= 20:
        levels = table[steps - 2]
    else:
        levels = loglinear_interp(table[-1], steps + 1)
    return _tail_to_zero(levels, total)


__all__ = ["get_sigmas_vp", "get_sigmas_laplace", "basic_schedule", "sd_turbo_schedule", "loglinear_interp",
           "table_schedule", "align_your_steps", "optimal_steps", "gits"]
