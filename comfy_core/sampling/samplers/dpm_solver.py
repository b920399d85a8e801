"""DPM-Solver with fixed (`dpm_fast`) and adaptive (`dpm_adaptive`) step sizes.

Lu et al. 2022, "DPM-Solver: A Fast ODE Solver for Diffusion Probabilistic Model Sampling in
Around 10 Steps" (arXiv 2206.00927): Algorithms 1-2 (DPM-Solver-1/2/3 single steps, in
t = -log sigma), the "fast" order schedule of section 3.4, and the adaptive DPM-Solver-12/23 of
Algorithm 4 with k-diffusion's PID step-size controller. Follows k-diffusion's `DPMSolver`.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import torch

from comfy_core.sampling.noise import NoiseSampler
from comfy_core.sampling.samplers.common import Denoiser, StepCallback, get_ancestral_step, seeded_noise_sampler


class PIDStepSizeController:
    """A PID controller on the log step size (Söderlind 2003, "Digital filters in adaptive
    time-stepping"), as used by k-diffusion for adaptive ODE steps."""

    def __init__(self, h: float, pcoeff: float, icoeff: float, dcoeff: float, order: float = 1,
                 accept_safety: float = 0.81, eps: float = 1e-8) -> None:
        self.h = h
        self.b1 = (pcoeff + icoeff + dcoeff) / order
        self.b2 = -(pcoeff + 2 * dcoeff) / order
        self.b3 = dcoeff / order
        self.accept_safety = accept_safety
        self.eps = eps
        self.errs: list[float] = []

    @staticmethod
    def limiter(x: float) -> float:
        return 1 + math.atan(x - 1)

    def propose_step(self, error: torch.Tensor | float) -> bool:
        """Scale `h` from the error estimate; True if the step that produced `error` is accepted."""
        inv_error = 1 / (float(error) + self.eps)
        if not self.errs:
            self.errs = [inv_error, inv_error, inv_error]
        self.errs[0] = inv_error
        factor = self.limiter(self.errs[0] ** self.b1 * self.errs[1] ** self.b2 * self.errs[2] ** self.b3)
        accept = factor >= self.accept_safety
        if accept:
            self.errs[2] = self.errs[1]
            self.errs[1] = self.errs[0]
        self.h *= factor
        return accept


class DPMSolver:
    """DPM-Solver steps on a denoiser `model(x, sigma, **extra_args)`, in t = -log(sigma)."""

    def __init__(self, model: Denoiser, extra_args: dict | None = None,
                 info_callback: Callable[[dict], None] | None = None) -> None:
        self.model = model
        self.extra_args = {} if extra_args is None else extra_args
        self.info_callback = info_callback

    @staticmethod
    def t(sigma: torch.Tensor) -> torch.Tensor:
        return -sigma.log()

    @staticmethod
    def sigma(t: torch.Tensor) -> torch.Tensor:
        return t.neg().exp()

    def eps(self, cache: dict, key: str, x: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, dict]:
        """Noise prediction at (x, t), memoised in `cache` under `key` within one step."""
        if key in cache:
            return cache[key], cache
        sigma = self.sigma(t) * x.new_ones([x.shape[0]])
        eps = (x - self.model(x, sigma, **self.extra_args)) / self.sigma(t)
        return eps, {key: eps, **cache}

    def dpm_solver_1_step(self, x: torch.Tensor, t: torch.Tensor, t_next: torch.Tensor,
                          cache: dict | None = None) -> tuple[torch.Tensor, dict]:
        cache = {} if cache is None else cache
        h = t_next - t
        eps, cache = self.eps(cache, "eps", x, t)
        return x - self.sigma(t_next) * h.expm1() * eps, cache

    def dpm_solver_2_step(self, x: torch.Tensor, t: torch.Tensor, t_next: torch.Tensor, r1: float = 1 / 2,
                          cache: dict | None = None) -> tuple[torch.Tensor, dict]:
        cache = {} if cache is None else cache
        h = t_next - t
        eps, cache = self.eps(cache, "eps", x, t)
        s1 = t + r1 * h
        u1 = x - self.sigma(s1) * (r1 * h).expm1() * eps
        eps_r1, cache = self.eps(cache, "eps_r1", u1, s1)
        x_2 = x - self.sigma(t_next) * h.expm1() * eps - self.sigma(t_next) / (2 * r1) * h.expm1() * (eps_r1 - eps)
        return x_2, cache

    def dpm_solver_3_step(self, x: torch.Tensor, t: torch.Tensor, t_next: torch.Tensor, r1: float = 1 / 3,
                          r2: float = 2 / 3, cache: dict | None = None) -> tuple[torch.Tensor, dict]:
        cache = {} if cache is None else cache
        h = t_next - t
        eps, cache = self.eps(cache, "eps", x, t)
        s1, s2 = t + r1 * h, t + r2 * h
        u1 = x - self.sigma(s1) * (r1 * h).expm1() * eps
        eps_r1, cache = self.eps(cache, "eps_r1", u1, s1)
        u2 = (x - self.sigma(s2) * (r2 * h).expm1() * eps
              - self.sigma(s2) * (r2 / r1) * ((r2 * h).expm1() / (r2 * h) - 1) * (eps_r1 - eps))
        eps_r2, cache = self.eps(cache, "eps_r2", u2, s2)
        x_3 = x - self.sigma(t_next) * h.expm1() * eps - self.sigma(t_next) / r2 * (h.expm1() / h - 1) * (eps_r2 - eps)
        return x_3, cache

    def _info(self, payload: dict) -> None:
        if self.info_callback is not None:
            self.info_callback(payload)

    def dpm_solver_fast(self, x: torch.Tensor, t_start: torch.Tensor, t_end: torch.Tensor, nfe: int,
                        eta: float = 0.0, s_noise: float = 1.0,
                        noise_sampler: NoiseSampler | None = None) -> torch.Tensor:
        """`nfe` model evaluations in steps of order 3 (then 2, 1), uniform in t (section 3.4)."""
        noise_sampler = seeded_noise_sampler(x, self.extra_args, noise_sampler)
        if not t_end > t_start and eta:
            raise ValueError("dpm_fast: eta must be 0 for reverse sampling")
        m = math.floor(nfe / 3) + 1
        ts = torch.linspace(t_start, t_end, m + 1, device=x.device)
        orders = [3] * (m - 2) + [2, 1] if nfe % 3 == 0 else [3] * (m - 1) + [nfe % 3]
        for i, order in enumerate(orders):
            cache: dict = {}
            t, t_next = ts[i], ts[i + 1]
            if eta:
                sd, _ = get_ancestral_step(self.sigma(t), self.sigma(t_next), eta)
                t_next_ = torch.minimum(t_end, self.t(sd))
                su = (self.sigma(t_next) ** 2 - self.sigma(t_next_) ** 2) ** 0.5
            else:
                t_next_, su = t_next, 0.0
            eps, cache = self.eps(cache, "eps", x, t)
            self._info({"x": x, "i": i, "t": ts[i], "t_up": t, "denoised": x - self.sigma(t) * eps})
            if order == 1:
                x, cache = self.dpm_solver_1_step(x, t, t_next_, cache=cache)
            elif order == 2:
                x, cache = self.dpm_solver_2_step(x, t, t_next_, cache=cache)
            else:
                x, cache = self.dpm_solver_3_step(x, t, t_next_, cache=cache)
            x = x + su * s_noise * noise_sampler(self.sigma(t), self.sigma(t_next))
        return x

    def dpm_solver_adaptive(self, x: torch.Tensor, t_start: torch.Tensor, t_end: torch.Tensor, order: int = 3,
                            rtol: float = 0.05, atol: float = 0.0078, h_init: float = 0.05, pcoeff: float = 0.0,
                            icoeff: float = 1.0, dcoeff: float = 0.0, accept_safety: float = 0.81,
                            eta: float = 0.0, s_noise: float = 1.0,
                            noise_sampler: NoiseSampler | None = None) -> tuple[torch.Tensor, dict]:
        """Embedded pairs DPM-Solver-12 / -23 with error control (Algorithm 4)."""
        noise_sampler = seeded_noise_sampler(x, self.extra_args, noise_sampler)
        if order not in (2, 3):
            raise ValueError(f"dpm_adaptive: order must be 2 or 3, got {order}")
        forward = t_end > t_start
        if not forward and eta:
            raise ValueError("dpm_adaptive: eta must be 0 for reverse sampling")
        h_init = abs(h_init) * (1 if forward else -1)
        atol_t, rtol_t = torch.tensor(atol), torch.tensor(rtol)
        s = t_start
        x_prev = x
        pid = PIDStepSizeController(h_init, pcoeff, icoeff, dcoeff, 1.5 if eta else order, accept_safety)
        info = {"steps": 0, "nfe": 0, "n_accept": 0, "n_reject": 0}
        while (s < t_end - 1e-5) if forward else (s > t_end + 1e-5):
            cache: dict = {}
            t = torch.minimum(t_end, s + pid.h) if forward else torch.maximum(t_end, s + pid.h)
            if eta:
                sd, _ = get_ancestral_step(self.sigma(s), self.sigma(t), eta)
                t_ = torch.minimum(t_end, self.t(sd))
                su = (self.sigma(t) ** 2 - self.sigma(t_) ** 2) ** 0.5
            else:
                t_, su = t, 0.0
            eps, cache = self.eps(cache, "eps", x, s)
            denoised = x - self.sigma(s) * eps
            if order == 2:
                x_low, cache = self.dpm_solver_1_step(x, s, t_, cache=cache)
                x_high, cache = self.dpm_solver_2_step(x, s, t_, cache=cache)
            else:
                x_low, cache = self.dpm_solver_2_step(x, s, t_, r1=1 / 3, cache=cache)
                x_high, cache = self.dpm_solver_3_step(x, s, t_, cache=cache)
            delta = torch.maximum(atol_t, rtol_t * torch.maximum(x_low.abs(), x_prev.abs()))
            error = torch.linalg.norm((x_low - x_high) / delta) / x.numel() ** 0.5
            accept = pid.propose_step(error)
            if accept:
                x_prev = x_low
                x = x_high + su * s_noise * noise_sampler(self.sigma(s), self.sigma(t))
                s = t
                info["n_accept"] += 1
            else:
                info["n_reject"] += 1
            info["nfe"] += order
            info["steps"] += 1
            self._info({"x": x, "i": info["steps"] - 1, "t": s, "t_up": s, "denoised": denoised,
                        "error": error, "h": pid.h, **info})
        return x, info


def _solver(model: Denoiser, extra_args: dict | None, callback: StepCallback) -> DPMSolver:
    solver = DPMSolver(model, extra_args)
    if callback is not None:
        solver.info_callback = lambda info: callback(
            {"sigma": solver.sigma(info["t"]), "sigma_hat": solver.sigma(info["t_up"]), **info})
    return solver


def _check_range(name: str, sigma_min: Any, sigma_max: Any) -> None:
    if sigma_min <= 0 or sigma_max <= 0:
        raise ValueError(f"{name}: sigma_min and sigma_max must be > 0, got {float(sigma_min)}, {float(sigma_max)}")


@torch.no_grad()
def sample_dpm_fast(model: Denoiser, x: torch.Tensor, sigma_min: float | torch.Tensor, sigma_max: float | torch.Tensor,
                    n: int, extra_args: dict | None = None, callback: StepCallback = None, disable: Any = None,
                    eta: float = 0.0, s_noise: float = 1.0, noise_sampler: NoiseSampler | None = None) -> torch.Tensor:
    """DPM-Solver-fast with `n` model evaluations from sigma_max to sigma_min (k-diffusion signature)."""
    _check_range("sample_dpm_fast", sigma_min, sigma_max)
    solver = _solver(model, extra_args, callback)
    t_start = solver.t(torch.as_tensor(sigma_max).clone().detach())
    t_end = solver.t(torch.as_tensor(sigma_min).clone().detach())
    return solver.dpm_solver_fast(x, t_start, t_end, n, eta, s_noise, noise_sampler)


@torch.no_grad()
def sample_dpm_adaptive(model: Denoiser, x: torch.Tensor, sigma_min: float | torch.Tensor,
                        sigma_max: float | torch.Tensor, extra_args: dict | None = None,
                        callback: StepCallback = None, disable: Any = None, order: int = 3, rtol: float = 0.05,
                        atol: float = 0.0078, h_init: float = 0.05, pcoeff: float = 0.0, icoeff: float = 1.0,
                        dcoeff: float = 0.0, accept_safety: float = 0.81, eta: float = 0.0, s_noise: float = 1.0,
                        noise_sampler: NoiseSampler | None = None, return_info: bool = False) -> Any:
    """Adaptive DPM-Solver-12/23 from sigma_max to sigma_min (k-diffusion signature)."""
    _check_range("sample_dpm_adaptive", sigma_min, sigma_max)
    solver = _solver(model, extra_args, callback)
    t_start = solver.t(torch.as_tensor(sigma_max).clone().detach())
    t_end = solver.t(torch.as_tensor(sigma_min).clone().detach())
    x, info = solver.dpm_solver_adaptive(x, t_start, t_end, order, rtol, atol, h_init, pcoeff, icoeff, dcoeff,
                                         accept_safety, eta, s_noise, noise_sampler)
    return (x, info) if return_info else x


def _sigma_range(sigmas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """ComfyUI's mapping from a sigma list to (sigma_min, sigma_max): a final 0 is skipped."""
    sigma_min = sigmas[-1]
    if sigma_min == 0:
        sigma_min = sigmas[-2]
    return sigma_min, sigmas[0]


@torch.no_grad()
def sample_dpm_fast_sigmas(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                           callback: StepCallback = None, disable: Any = None) -> torch.Tensor:
    """ComfyUI's `dpm_fast`: a sigma list becomes (min, max) and `len(sigmas) - 1` evaluations."""
    if len(sigmas) <= 1:
        return x
    sigma_min, sigma_max = _sigma_range(sigmas)
    return sample_dpm_fast(model, x, sigma_min, sigma_max, len(sigmas) - 1, extra_args=extra_args,
                           callback=callback, disable=disable)


@torch.no_grad()
def sample_dpm_adaptive_sigmas(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                               callback: StepCallback = None, disable: Any = None, **options: Any) -> torch.Tensor:
    """ComfyUI's `dpm_adaptive`: a sigma list becomes (min, max); the step count is adaptive."""
    if len(sigmas) <= 1:
        return x
    sigma_min, sigma_max = _sigma_range(sigmas)
    return sample_dpm_adaptive(model, x, sigma_min, sigma_max, extra_args=extra_args, callback=callback,
                               disable=disable, **options)


def sigma_range_sampler(fn: Callable[..., torch.Tensor], steps_from_sigmas: bool) -> Callable[..., torch.Tensor]:
    """A sigma-list sampler over a (sigma_min, sigma_max) one such as a host's replacement of
    `sample_dpm_fast` (`steps_from_sigmas`: `len(sigmas) - 1` evaluations) or `sample_dpm_adaptive`
    (its options passed on): ComfyUI's `ksampler` closures for dpm_fast / dpm_adaptive."""

    @torch.no_grad()
    def sample(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
               callback: StepCallback = None, disable: Any = None, **options: Any) -> torch.Tensor:
        if len(sigmas) <= 1:
            return x
        sigma_min, sigma_max = _sigma_range(sigmas)
        if steps_from_sigmas:
            return fn(model, x, sigma_min, sigma_max, len(sigmas) - 1, extra_args=extra_args, callback=callback,
                      disable=disable)
        return fn(model, x, sigma_min, sigma_max, extra_args=extra_args, callback=callback, disable=disable, **options)

    return sample
