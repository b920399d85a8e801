"""Two samplers of ComfyUI's comfy_extras/nodes_advanced_samplers.py, written here from their maths.

- `sample_lcm_upscale`: LCM steps (Luo et al. 2023, arXiv 2310.04378) that enlarge the latent
  between steps: after step i (i < m - 1) the x0 prediction is resized by the factor
  `linspace(1, total_upscale, m)[i + 1]` of the original size (m = `upscale_steps` + 1, by default
  half the steps), then re-noised to the next sigma with fresh global-RNG noise, as ComfyUI does.
- `sample_euler_cfg_pp_alt`: Euler with the "alternative" CFG++ (Chung et al. 2024, arXiv
  2406.08070) step `d = (x - 2 D + D_uncond) / sigma`.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from comfy_core.sampling.samplers.common import StepCallback, StepDenoiser, report, to_d
from comfy_core.sampling.samplers.extra import _capture_uncond

UPSCALE_METHODS = ("bislerp", "nearest-exact", "bilinear", "area", "bicubic")


def _resize(x: torch.Tensor, width: int, height: int, method: str) -> torch.Tensor:
    if method == "bislerp":
        from comfy_core.models.latent_resize import bislerp

        return bislerp(x, width, height)
    from comfy_core.image.resize import upscale_samples

    return upscale_samples(x, width, height, method, "disabled")


@torch.no_grad()
def sample_lcm_upscale(model: Any, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                       callback: StepCallback = None, disable: Any = None, total_upscale: float = 2.0,
                       upscale_method: str = "bislerp", upscale_steps: int | None = None) -> torch.Tensor:
    """LCM sampling with progressive upscaling (see the module docstring)."""
    run = StepDenoiser(model, x, extra_args, callback)
    if upscale_steps is None:
        upscale_steps = max(len(sigmas) // 2 + 1, 2)
    else:
        upscale_steps = min(upscale_steps + 1, len(sigmas) + 1)
    factors = np.linspace(1.0, total_upscale, upscale_steps)[1:]
    height, width = x.shape[-2], x.shape[-1]
    for i in range(len(sigmas) - 1):
        x = run.step(x, sigmas, i)
        if i < len(factors):
            x = _resize(x, round(width * factors[i]), round(height * factors[i]), upscale_method)
        if sigmas[i + 1] > 0:
            x = x + sigmas[i + 1] * torch.randn_like(x)
    return x


@torch.no_grad()
def sample_euler_cfg_pp_alt(model: Any, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                            callback: StepCallback = None, disable: Any = None) -> torch.Tensor:
    """Euler with the alternative CFG++ direction (see the module docstring)."""
    extra_args, uncond = _capture_uncond(extra_args)
    run = StepDenoiser(model, x, extra_args, callback)
    for i in range(len(sigmas) - 1):
        denoised = run(x, sigmas[i])
        d = to_d(x - denoised + uncond(), sigmas[i], denoised)
        report(callback, x, i, sigmas[i], sigmas[i], denoised)
        x = x + d * (sigmas[i + 1] - sigmas[i])
    return x
