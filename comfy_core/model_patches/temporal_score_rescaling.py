"""Temporal Score Rescaling (TSR) as a post-CFG hook.

Xu et al. 2025, "Temporal Score Rescaling for Temperature Sampling in Diffusion and Flow Models"
(arXiv 2510.01184), eq. 6: the model's score is multiplied by a ratio that depends only on the
signal-to-noise ratio of the step and two settings, `k` (the temperature: below 1 sharper, more
detailed; above 1 smoother; 1 leaves the score as it is) and `sigma` (how early the rescaling
sets in: the larger, the earlier):

    r(snr) = (snr * sigma^2 + 1) / (snr * sigma^2 / k + 1)      (r -> k as snr -> inf)

Behaviour of today's ComfyUI `TemporalScoreRescaling` node (comfy_extras/nodes_eps.py), written
here: the hook gets the guided x0 prediction `denoised` at input `x` and the step's sigma (the
batch's first), takes the model's half-log-SNR `lambda` (`-log sigma`, or `-logit sigma` for a
rectified-flow model, whose `alpha = 1 - sigma`), `snr = exp(2 lambda)`, and returns
`lerp(x / alpha, denoised, r)` with `alpha = sigma * exp(lambda)`: the noise part of the
prediction scaled by `r` (from `x = alpha * x0 + sigma * eps`). Nothing changes at `k == 1`, at
sigma 0, or where the SNR underflows to 0.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


def is_flow(model_sampling: Any) -> bool:
    """Whether `model_sampling` is a rectified-flow ("const") parametrisation."""
    return getattr(model_sampling, "prediction", None) == "const"


def sigma_to_half_log_snr(sigma: torch.Tensor, model_sampling: Any) -> torch.Tensor:
    """`lambda = log(alpha / sigma)`: `-logit(sigma)` for flow models (alpha = 1 - sigma), else
    `-log(sigma)` (variance-exploding sigma, alpha = 1)."""
    if is_flow(model_sampling):
        return sigma.logit().neg()
    return sigma.log().neg()


def tsr_rescaling_factor(snr: torch.Tensor, tsr_k: float, tsr_variance: float) -> torch.Tensor:
    """Eq. 6 of the paper: `(snr*v + 1) / (snr*v/k + 1)`, `v = tsr_sigma^2`; `k` at infinite SNR."""
    ratio = (snr * tsr_variance + 1) / (snr * tsr_variance / tsr_k + 1)
    return torch.where(torch.isposinf(snr), torch.as_tensor(tsr_k, dtype=ratio.dtype, device=ratio.device), ratio)


def temporal_score_rescaling(denoised: torch.Tensor, x: torch.Tensor, sigma: torch.Tensor, model_sampling: Any,
                             tsr_k: float, tsr_sigma: float) -> torch.Tensor:
    """The rescaled x0 prediction `[B, C, ...]` for the scalar step `sigma` (see the module docstring)."""
    if tsr_k == 1 or sigma.item() == 0:
        return denoised
    half_log_snr = sigma_to_half_log_snr(sigma, model_sampling)
    snr = (2 * half_log_snr).exp()
    if snr.item() == 0:
        return denoised
    r = tsr_rescaling_factor(snr, tsr_k, tsr_sigma ** 2)
    alpha = sigma * half_log_snr.exp()
    return torch.lerp(x / alpha, denoised, r)


@dataclass(frozen=True)
class TemporalScoreRescaling:
    """`sampler_post_cfg_function(args)`: `args["denoised"]` rescaled at the step's first sigma,
    with the running model's `model_sampling` (`args["model"]`, the patched diffusion model)."""

    tsr_k: float
    tsr_sigma: float

    def __call__(self, args: dict) -> torch.Tensor:
        sigma = args["sigma"][0]
        return temporal_score_rescaling(args["denoised"], args["input"], sigma, args["model"].model_sampling,
                                        self.tsr_k, self.tsr_sigma)

    def cache_signature(self) -> tuple:
        return ("TemporalScoreRescaling", self.tsr_k, self.tsr_sigma)
