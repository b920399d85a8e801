"""Vocabulary shared by the samplers: the Karras ODE derivative, ancestral step split, churn,
the half-log-SNR of a sigma, the seeded default noise, and `StepDenoiser` (the denoiser of one run).

After k-diffusion `sampling.py` (Crowson; MIT) and Karras et al. 2022, "Elucidating the Design
Space of Diffusion-Based Generative Models" (EDM). Pure functions, plus one small run object.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from comfy_core import extension_points
from comfy_core.sampling import noise as _noise
from comfy_core.sampling.noise import NoiseSampler

Denoiser = Callable[..., torch.Tensor]
StepCallback = Callable[[dict[str, Any]], None] | None


def append_dims(v: torch.Tensor, ndim: int) -> torch.Tensor:
    """View `v` [B] (or a scalar) with trailing singleton dims up to `ndim`."""
    v = torch.as_tensor(v)
    missing = ndim - v.ndim
    if missing < 0:
        raise ValueError(f"append_dims: input has {v.ndim} dims, more than target {ndim}")
    return v[(...,) + (None,) * missing]


def to_d(x: torch.Tensor, sigma: torch.Tensor, denoised: torch.Tensor) -> torch.Tensor:
    """The probability-flow ODE derivative dx/dsigma = (x - D(x, sigma)) / sigma (EDM eq. 3)."""
    return (x - denoised) / append_dims(sigma, x.ndim)


def half_log_snr(sigma: torch.Tensor) -> torch.Tensor:
    """lambda = log(alpha / sigma) of a VE sigma (alpha = 1 for eps/v models): -log(sigma).

    The time variable of DPM-Solver (Lu et al. 2022, arXiv 2206.00927) and its successors.
    """
    return sigma.log().neg()


def sigma_of_half_log_snr(lam: torch.Tensor) -> torch.Tensor:
    """The inverse of `half_log_snr`: sigma = exp(-lambda)."""
    return lam.neg().exp()


def seeded_noise_sampler(x: torch.Tensor, extra_args: dict, noise_sampler: NoiseSampler | None) -> NoiseSampler:
    """`noise_sampler`, or else the default one seeded from `extra_args["seed"]`: the host's
    `default_noise_sampler` extension point (a pack's `comfy.k_diffusion.sampling.
    default_noise_sampler = f`: AnimateDiff's and smZNodes' noise options) or ComfyUI's."""
    if noise_sampler is not None:
        return noise_sampler
    default = extension_points.current().default_noise_sampler or _noise.default_noise_sampler
    return default(x, seed=extra_args.get("seed"))


def get_ancestral_step(sigma_from: torch.Tensor, sigma_to: torch.Tensor,
                       eta: float = 1.0) -> tuple[torch.Tensor, torch.Tensor | float]:
    """Split a step sigma_from -> sigma_to into a deterministic step to `sigma_down` plus fresh
    noise of std `sigma_up`, with sigma_down^2 + sigma_up^2 = sigma_to^2 (DDPM ancestral sampling
    in VE form; `eta` scales the noise, 0 = deterministic)."""
    if not eta:
        return sigma_to, 0.0
    sigma_up = min(sigma_to, eta * (sigma_to ** 2 * (sigma_from ** 2 - sigma_to ** 2) / sigma_from ** 2) ** 0.5)
    sigma_down = (sigma_to ** 2 - sigma_up ** 2) ** 0.5
    return sigma_down, sigma_up


def churn(x: torch.Tensor, sigmas: torch.Tensor, i: int, s_churn: float, s_tmin: float,
          s_tmax: float, s_noise: float) -> tuple[torch.Tensor, torch.Tensor]:
    """EDM Algorithm 2, lines 5-7: raise sigma_i to sigma_hat = sigma_i (1 + gamma) by adding noise.

    With `s_churn == 0` (the default everywhere) nothing is drawn, as in ComfyUI. Noise comes from
    the global RNG, as in k-diffusion.
    """
    if s_churn > 0:
        gamma = min(s_churn / (len(sigmas) - 1), 2 ** 0.5 - 1) if s_tmin <= sigmas[i] <= s_tmax else 0.0
    else:
        gamma = 0.0
    sigma_hat = sigmas[i] * (gamma + 1)
    if gamma > 0:
        eps = torch.randn_like(x) * s_noise
        x = x + eps * (sigma_hat ** 2 - sigmas[i] ** 2) ** 0.5
    return x, sigma_hat


def report(callback: StepCallback, x: torch.Tensor, i: int, sigma: torch.Tensor,
           sigma_hat: torch.Tensor, denoised: torch.Tensor) -> None:
    """Call the per-step callback with k-diffusion's dict (it may raise to stop sampling)."""
    if callback is not None:
        callback({"x": x, "i": i, "sigma": sigma, "sigma_hat": sigma_hat, "denoised": denoised})


class StepDenoiser:
    """The denoiser of one sampling run: `model` with the run's `extra_args` on a batch like `x`,
    and the per-step `callback`.

    `run(x, sigma)` evaluates D(x, sigma) at any sigma (intermediate points of a step);
    `run.step(x, sigmas, i)` evaluates step i and reports it, as k-diffusion's loops do.
    """

    def __init__(self, model: Denoiser, x: torch.Tensor, extra_args: dict | None, callback: StepCallback) -> None:
        self.model = model
        self.extra_args = {} if extra_args is None else extra_args
        self.callback = callback
        self._ones = x.new_ones([x.shape[0]])  # [B]: one sigma per batch item

    def __call__(self, x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        return self.model(x, sigma * self._ones, **self.extra_args)

    def step(self, x: torch.Tensor, sigmas: torch.Tensor, i: int,
             sigma_hat: torch.Tensor | None = None) -> torch.Tensor:
        """D(x, sigma_hat) for step i (sigma_hat = sigmas[i] unless churn raised it), reported."""
        sigma_hat = sigmas[i] if sigma_hat is None else sigma_hat
        denoised = self(x, sigma_hat)
        report(self.callback, x, i, sigmas[i], sigma_hat, denoised)
        return denoised


MultistepAdvance = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, int, int, list[torch.Tensor]], torch.Tensor]


def derivative_multistep(run: StepDenoiser, x: torch.Tensor, sigmas: torch.Tensor, max_order: int,
                         advance: MultistepAdvance) -> torch.Tensor:
    """Linear multistep in sigma on the ODE derivative d = (x - D) / sigma (Adams-Bashforth family:
    iPNDM and DEIS, Zhang & Chen 2023, arXiv 2204.13902).

    Per step: evaluate and report D, then `advance(x, d, denoised, i, order, history) -> x_next`
    with order = min(max_order, i + 1) and `history` the previous max_order - 1 derivatives,
    oldest first.
    """
    history: list[torch.Tensor] = []
    for i in range(len(sigmas) - 1):
        denoised = run.step(x, sigmas, i)
        d = (x - denoised) / sigmas[i]
        x_next = advance(x, d, denoised, i, min(max_order, i + 1), history)
        history.append(d)
        if len(history) > max_order - 1:
            history.pop(0)
        x = x_next
    return x
