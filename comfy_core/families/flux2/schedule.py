"""FLUX.2's sampling schedule (BFL's FLUX.2 reference sampler, as ComfyUI's `Flux2Scheduler` and
diffusers' `Flux2Pipeline` compute it): `steps + 1` times evenly from 1 to 0, shifted by the
exponential time shift `e^mu / (e^mu + (1/t - 1))` with `mu` fitted to the image's token count
(`width * height / 16^2`) and the step count: linear in both between two fits (10 and 200 steps)
up to 4300 tokens, and the 200-step fit alone above."""
from __future__ import annotations

import math

import torch

# mu = a * tokens + b for 10 steps (a1, b1) and 200 steps (a2, b2)
_FIT_10 = (8.73809524e-05, 1.89833333)
_FIT_200 = (0.00016927, 0.45666666)
_LARGE = 4300


def empirical_mu(tokens: int, steps: int) -> float:
    """The shift exponent for `tokens` image tokens and `steps` steps."""
    at_200 = _FIT_200[0] * tokens + _FIT_200[1]
    if tokens > _LARGE:
        return float(at_200)
    at_10 = _FIT_10[0] * tokens + _FIT_10[1]
    slope = (at_200 - at_10) / 190.0
    return float(slope * steps + (at_200 - 200.0 * slope))


def flux2_sigmas(steps: int, width: int, height: int) -> torch.Tensor:
    """`[steps + 1]` float32 sigmas from 1 to 0 for an image of `width` x `height` pixels."""
    if steps < 1 or width < 1 or height < 1:
        raise ValueError(f"Flux.2 schedule: steps, width and height must be positive, got {steps}, {width}, {height}")
    scale = math.exp(empirical_mu(round(width * height / (16 * 16)), steps))
    t = torch.linspace(1, 0, steps + 1)
    return scale / (scale + (1 / t - 1))  # t = 0 -> 1/0 = inf -> 0
