"""Custom-sampling schedules and sigma operations against their defining formulas, written here
in float64 numpy (ComfyUI 0.3.64's semantics), to within one float32 ulp."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from comfy_core.sampling import sigma_ops, sigma_schedules
from comfy_core.models.model_sampling import ModelSampling
from comfy_core.sampling.schedule_tables import AYS_NOISE_LEVELS, GITS_NOISE_LEVELS, OPTIMAL_STEPS_NOISE_LEVELS
from comfy_core.sampling.schedulers import calculate_sigmas

SMAX, SMIN = 14.614642, 0.0291675


def assert_within_ulp(ours: torch.Tensor, ref, ulps: float = 1.0) -> None:
    ref = np.asarray(ref, dtype=np.float64)
    assert ours.dtype == torch.float32 and tuple(ours.shape) == ref.shape
    got = ours.double().numpy()
    tol = ulps * np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
    assert np.all(np.abs(got - ref) <= tol), np.max(np.abs(got - ref) / np.maximum(tol, 1e-300))


def _grid(a: float, b: float, n: int) -> np.ndarray:
    """The float32 grid both ComfyUI and we evaluate these formulas on (torch.linspace), in float64."""
    return torch.linspace(a, b, n).double().numpy()


def loglinear(levels, n):
    """Resample in log sigma over an even grid in [0, 1] (Align Your Steps' recipe)."""
    logs = np.log(np.asarray(levels, dtype=np.float64))
    xs = np.linspace(0, 1, len(levels))
    return np.exp(np.interp(np.linspace(0, 1, n), xs, logs[::-1]))[::-1]


@pytest.mark.parametrize("n,mu,beta", [(13, 0.3, 0.7), (20, 0.0, 0.5), (1, 0.0, 0.5)])
def test_laplace(n, mu, beta) -> None:
    u = _grid(0, 1, n)
    lam = mu - beta * np.sign(0.5 - u) * np.log(1 - 2 * np.abs(0.5 - u) + 1e-5)
    ref = np.clip(np.exp(lam), SMIN, SMAX)
    # log then exp in float32 (as ComfyUI, whose bits ours equal): 2 ulps of the float64 formula.
    assert_within_ulp(sigma_schedules.get_sigmas_laplace(n, SMIN, SMAX, mu, beta), ref, ulps=2)


def test_vp() -> None:
    t = _grid(1, 1e-3, 11)
    ref = np.append(np.sqrt(np.expm1(19.9 * t ** 2 / 2 + 0.1 * t)), 0.0)
    # exp of a float32 argument near 10 amplifies its rounding ~10x; ComfyUI evaluates in float32 too
    # (and gives the same bits as ours), so the float64 formula is met to 4 ulps, not 1.
    assert_within_ulp(sigma_schedules.get_sigmas_vp(11, 19.9, 0.1, 1e-3), ref, ulps=4)


@pytest.mark.parametrize("family", ["SD1", "SDXL", "SVD"])
@pytest.mark.parametrize("steps,denoise", [(10, 1.0), (17, 1.0), (4, 1.0), (12, 0.5)])
def test_align_your_steps(family, steps, denoise) -> None:
    levels = AYS_NOISE_LEVELS[family]
    full = np.asarray(levels) if steps == 10 else loglinear(levels, steps + 1)
    keep = steps if denoise >= 1.0 else round(steps * denoise)
    ref = full[-(keep + 1):].copy()
    ref[-1] = 0.0
    assert_within_ulp(sigma_schedules.align_your_steps(family, steps, denoise), ref)


def test_align_your_steps_published_sd1_schedule_and_zero_denoise() -> None:
    out = sigma_schedules.align_your_steps("SD1", 10, 1.0)
    assert len(out) == 11 and float(out[0]) == pytest.approx(14.6146412293) and float(out[-1]) == 0.0
    assert sigma_schedules.align_your_steps("SD1", 10, 0.0).numel() == 0


@pytest.mark.parametrize("family", ["FLUX", "Wan", "Chroma"])
@pytest.mark.parametrize("steps,denoise", [(20, 1.0), (13, 0.5), (40, 1.0), (10, 1.0)])
def test_optimal_steps(family, steps, denoise) -> None:
    levels = OPTIMAL_STEPS_NOISE_LEVELS[family]
    full = np.asarray(levels) if len(levels) == steps + 1 else loglinear(levels, steps + 1)
    keep = steps if denoise >= 1.0 else round(steps * denoise)
    ref = full[-(keep + 1):].copy()
    ref[-1] = 0.0
    assert_within_ulp(sigma_schedules.optimal_steps(family, steps, denoise), ref)


@pytest.mark.parametrize("coeff", [0.8, 1.2, 1.5, 1.05])
@pytest.mark.parametrize("steps,denoise", [(2, 1.0), (10, 1.0), (20, 0.75), (33, 1.0)])
def test_gits(coeff, steps, denoise) -> None:
    table = GITS_NOISE_LEVELS[round(coeff, 2)]
    full = np.asarray(table[steps - 2]) if steps <= 20 else loglinear(table[-1], steps + 1)
    assert len(table[min(steps, 20) - 2]) == min(steps, 20) + 1  # the table holds steps + 1 levels
    keep = steps if denoise >= 1.0 else round(steps * denoise)
    ref = full[-(keep + 1):].copy()
    ref[-1] = 0.0
    assert_within_ulp(sigma_schedules.gits(coeff, steps, denoise), ref)


@pytest.mark.parametrize("steps,denoise", [(1, 1.0), (3, 0.8), (4, 0.55), (10, 1.0)])
def test_sd_turbo(steps, denoise) -> None:
    ms = ModelSampling()
    start = 10 - int(10 * denoise)
    timesteps = [999 - 100 * i for i in range(10)][start:start + steps]
    ref = [float(ms.sigmas[t]) for t in timesteps] + [0.0]
    assert_within_ulp(sigma_schedules.sd_turbo_schedule(ms, steps, denoise), ref)


@pytest.mark.parametrize("scheduler", ["simple", "karras", "normal", "beta", "exponential"])
def test_basic_schedule_tail(scheduler) -> None:
    ms = ModelSampling()
    assert torch.equal(sigma_schedules.basic_schedule(ms, scheduler, 7, 1.0), calculate_sigmas(ms, scheduler, 7))
    # denoise 0.6: the last 8 of int(7 / 0.6) = 11 steps
    assert torch.equal(sigma_schedules.basic_schedule(ms, scheduler, 7, 0.6), calculate_sigmas(ms, scheduler, 11)[-8:])
    assert sigma_schedules.basic_schedule(ms, scheduler, 7, 0.0).numel() == 0


S = torch.tensor([14.6, 8.0, 4.0, 2.0, 1.0, 0.5, 0.0])


def test_split_sigmas() -> None:
    high, low = sigma_ops.split_sigmas(S, 2)
    assert high.tolist() == S[:3].tolist() and low.tolist() == S[2:].tolist()
    high, low = sigma_ops.split_sigmas_denoise(S, 0.34)  # round(6 * 0.34) = 2 low steps: S[:-2], S[-3:]
    assert high.tolist() == S[:5].tolist() and low.tolist() == S[4:].tolist()
    high, low = sigma_ops.split_sigmas_denoise(S, 0.0)  # as ComfyUI: sigmas[:-0] is empty
    assert high.numel() == 0 and low.tolist() == [0.0]


def test_flip_and_set_first() -> None:
    flipped = sigma_ops.flip_sigmas(S)
    assert flipped.tolist()[1:] == S.flip(0).tolist()[1:] and float(flipped[0]) == pytest.approx(1e-4)
    assert float(S[-1]) == 0.0  # input untouched
    assert sigma_ops.flip_sigmas(torch.FloatTensor([])).numel() == 0
    first = sigma_ops.set_first_sigma(S, 20.5)
    assert float(first[0]) == 20.5 and first.tolist()[1:] == S.tolist()[1:] and float(S[0]) == pytest.approx(14.6)


@pytest.mark.parametrize("spacing", ["linear", "cosine", "sine"])
def test_extend_intermediate_sigmas(spacing) -> None:
    f = {"linear": lambda u: u, "cosine": lambda u: math.sin(u * math.pi / 2),
         "sine": lambda u: 1 - math.cos(u * math.pi / 2)}[spacing]
    ref: list[float] = []
    s = S.tolist()
    for a, b in zip(s[:-1], s[1:]):
        ref.append(a)
        if 2.0 <= a <= 8.0:  # start_at 8, end_at 2
            ref += [a + f(k / 3) * (b - a) for k in (1, 2)]
    ref.append(s[-1])
    assert_within_ulp(sigma_ops.extend_intermediate_sigmas(S, 3, 8.0, 2.0, spacing), ref, ulps=2)
    unbounded = sigma_ops.extend_intermediate_sigmas(S, 2, -1.0, 0.0, spacing)  # start < 0: no upper bound
    assert len(unbounded) == len(S) + (len(S) - 1)


def test_sampling_percent_to_sigma() -> None:
    ms = ModelSampling()
    assert sigma_ops.sampling_percent_to_sigma(ms, 0.3, False) == ms.percent_to_sigma(0.3)
    assert sigma_ops.sampling_percent_to_sigma(ms, 0.0, True) == pytest.approx(float(ms.sigma_max))
    assert sigma_ops.sampling_percent_to_sigma(ms, 1.0, True) == pytest.approx(float(ms.sigma_min))
    assert sigma_ops.sampling_percent_to_sigma(ms, 0.0, False) == ms.percent_to_sigma(0.0)
