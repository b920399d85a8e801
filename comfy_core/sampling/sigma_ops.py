"""Operations on SIGMAS lists (1-D tensors), as ComfyUI's sigma nodes define them
(comfy_extras/nodes_custom_sampler.py: SplitSigmas, SplitSigmasDenoise, FlipSigmas, SetFirstSigma,
ExtendIntermediateSigmas, SamplingPercentToSigma). Inputs are never modified.
"""
from __future__ import annotations

import math
from typing import Any

import torch

SPACINGS = ("linear", "cosine", "sine")


def split_sigmas(sigmas: torch.Tensor, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(sigmas[:step + 1], sigmas[step:]): the two share sigmas[step]."""
    return sigmas[:step + 1], sigmas[step:]


def split_sigmas_denoise(sigmas: torch.Tensor, denoise: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Split so the low part has `round(steps * denoise)` steps. As ComfyUI, the high part is
    `sigmas[:-n]`, so it is empty when n rounds to 0."""
    steps = max(sigmas.shape[-1] - 1, 0)
    n = round(steps * denoise)
    return sigmas[:-n], sigmas[-(n + 1):]


def flip_sigmas(sigmas: torch.Tensor) -> torch.Tensor:
    """Reversed; a leading 0 becomes 1e-4 (a sampler cannot start at sigma 0)."""
    if len(sigmas) == 0:
        return sigmas
    out = sigmas.flip(0)
    if out[0] == 0:
        out[0] = 0.0001
    return out


def set_first_sigma(sigmas: torch.Tensor, sigma: float) -> torch.Tensor:
    out = sigmas.clone()
    out[0] = sigma
    return out


def extend_intermediate_sigmas(sigmas: torch.Tensor, steps: int, start_at_sigma: float, end_at_sigma: float,
                               spacing: str) -> torch.Tensor:
    """Insert `steps - 1` points inside every step whose start lies in [end_at_sigma, start_at_sigma]
    (start < 0: no upper bound), at fractions f(k/steps) of the step: f = identity (linear),
    sin(x pi/2) (cosine) or 1 - cos(x pi/2) (sine)."""
    if spacing not in SPACINGS:
        raise ValueError(f"ExtendIntermediateSigmas: spacing must be one of {SPACINGS}, got {spacing!r}")
    upper = float("inf") if start_at_sigma < 0 else start_at_sigma
    grid = torch.linspace(0, 1, steps + 1, device=sigmas.device)[1:-1]
    if spacing == "cosine":
        fractions = torch.sin(grid * math.pi / 2)
    elif spacing == "sine":
        fractions = 1 - torch.cos(grid * math.pi / 2)
    else:
        fractions = grid
    out: list[Any] = []
    for i in range(len(sigmas) - 1):
        current, following = sigmas[i], sigmas[i + 1]
        out.append(current)
        if end_at_sigma <= current <= upper:
            out.extend((fractions * (following - current) + current).tolist())
    if len(sigmas) > 0:
        out.append(sigmas[-1])
    return torch.FloatTensor(out)


def sampling_percent_to_sigma(model_sampling: Any, sampling_percent: float, return_actual_sigma: bool) -> float:
    """The sigma at a sampling percent; with `return_actual_sigma`, 0 and 1 give sigma_max and
    sigma_min instead of the interval-check sentinels (ComfyUI's percent_to_sigma returns huge / 0)."""
    value = model_sampling.percent_to_sigma(sampling_percent)
    if return_actual_sigma:
        if sampling_percent == 0.0:
            value = model_sampling.sigma_max.item()
        elif sampling_percent == 1.0:
            value = model_sampling.sigma_min.item()
    return value
