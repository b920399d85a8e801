"""VOID's DDIM loop (ComfyUI's `VOID_DDIM`, `comfy_extras/nodes_void.py`; written here; the SAMPLER
object VOIDSampler gives wraps `void_ddim`, nodes/void_nodes.py): the
deterministic DDIM update (Song et al. 2021, eq. 12 with eta 0) in the variance-preserving space
VOID was trained in (diffusers' CogVideoXDDIMScheduler), on any sigma schedule.

The noise goes in as it is (float32, std about 1: no `noise_scaling`); at each step
`a = 1 / (1 + sigma^2)`, the model's clean estimate `x0` gives `eps = (x - sqrt(a) x0) / sqrt(1 - a)`
and the next sample is `sqrt(a') x0 + sqrt(1 - a') eps`; a last sigma of 0 gives `x0` itself. The
latent image and the denoise mask are not used (VOID's mask is in its conditioning).
"""
from __future__ import annotations

from typing import Any, Callable

import torch


def ddim_vp_step(x: torch.Tensor, denoised: torch.Tensor, sigma: torch.Tensor | float,
                 sigma_next: torch.Tensor | float) -> torch.Tensor:
    """One DDIM step from `sigma` to `sigma_next` in variance-preserving space (the sigmas' own
    precision, float32 for a schedule tensor, as ComfyUI computes it)."""
    if float(sigma_next) == 0:
        return denoised
    a, a_next = 1.0 / (1.0 + sigma ** 2), 1.0 / (1.0 + sigma_next ** 2)
    eps = (x - a ** 0.5 * denoised) / (1.0 - a) ** 0.5
    return a_next ** 0.5 * denoised + (1.0 - a_next) ** 0.5 * eps


def void_ddim(model: Callable[..., torch.Tensor], sigmas: torch.Tensor, extra_args: dict, callback: Any,
              noise: torch.Tensor) -> torch.Tensor:
    """The loop (module docstring): `model(x, sigma [B], model_options=, seed=)` gives the clean
    estimate; `callback(i, denoised, x, steps)` before each update."""
    x = noise.to(torch.float32)
    options, seed = extra_args.get("model_options", {}), extra_args.get("seed")
    ones = x.new_ones([x.shape[0]])
    total = len(sigmas) - 1
    for i in range(total):
        sigma, sigma_next = sigmas[i], sigmas[i + 1]
        denoised = model(x, sigma * ones, model_options=options, seed=seed)
        if callback is not None:
            callback(i, denoised, x, total)
        x = ddim_vp_step(x, denoised, sigma, sigma_next)
    return x
