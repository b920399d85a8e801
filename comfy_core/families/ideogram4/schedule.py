"""Ideogram 4's sampling schedule (today's ComfyUI's `comfy_extras/nodes_ideogram4.py`:
`ideogram4_sigmas`, the Ideogram4Scheduler node; diffusers' `pipeline_ideogram4._logit_normal_sigmas`).

A logit-normal schedule in Ideogram's time `t` (0 noise, 1 clean): the step boundaries are the
quantiles `u = linspace(0, 1, steps + 1)` (float64), `t(u) = 1 - expit(m + std * probit(u))` with the
resolution-aware mean `m = mu + ln(width * height / 512^2) / 2`, clamped to the logSNR range
[-15, 18] (`t_min = 1 / (1 + e^9)`, `t_max = 1 / (1 + e^-7.5)`); sigma = `1 - t`, in descending order,
the last one set to 0 (the clamp leaves about 6e-4) so the run ends fully denoised; float32.
"""
from __future__ import annotations

import math

import torch

LOGSNR_MIN = -15.0
LOGSNR_MAX = 18.0


def ideogram4_sigmas(steps: int, width: int, height: int, mu: float, std: float) -> torch.Tensor:
    """The `steps + 1` descending sigmas (float32, the last 0) of Ideogram 4's schedule for an image
    of `width` x `height` pixels (see the module doc)."""
    if steps < 1:
        raise ValueError(f"Ideogram 4's schedule needs at least one step, got {steps}")
    mean = float(mu) + 0.5 * math.log((int(width) * int(height)) / (512 * 512))
    u = torch.linspace(0.0, 1.0, int(steps) + 1, dtype=torch.float64)
    t = 1.0 - torch.special.expit(mean + float(std) * torch.special.ndtri(u))
    t = t.clamp(1.0 / (1.0 + math.exp(0.5 * LOGSNR_MAX)), 1.0 / (1.0 + math.exp(0.5 * LOGSNR_MIN)))
    sigmas = (1.0 - t).flip(0)
    sigmas[-1] = 0.0
    return sigmas.to(torch.float32)


__all__ = ["LOGSNR_MAX", "LOGSNR_MIN", "ideogram4_sigmas"]
