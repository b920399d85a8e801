"""DDPM beta schedules by name, the ones latent-diffusion models and AnimateDiff were trained on.

After ComfyUI's `comfy/ldm/modules/diffusionmodules/util.py` `make_beta_schedule` (itself from
CompVis latent-diffusion), which `comfy.model_sampling.ModelSamplingDiscrete` reads from a model
config's `sampling_settings["beta_schedule"]`:

- "linear": latent diffusion's scaled-linear betas, `linspace(sqrt(start), sqrt(end), T)^2`;
- "sqrt_linear": plain `linspace(start, end, T)` (the original AnimateDiff motion modules);
- "sqrt": `sqrt(linspace(start, end, T))`;
- "cosine": Nichol & Dhariwal 2021, "Improved DDPM", alpha_bar = cos^2((t/T + s) / (1 + s) * pi/2),
  betas clipped to [0, 0.999];
- "squaredcos_cap_v2": the same cosine discretised per step with s = 0.008 (diffusers' name;
  ComfyUI builds it as a NumPy array its sampler cannot use, here it is a tensor like the rest).

All are float64 tensors of shape [T].
"""
from __future__ import annotations

import math

import torch

BETA_SCHEDULES = ("linear", "sqrt_linear", "sqrt", "cosine", "squaredcos_cap_v2")


class BetaScheduleError(ValueError):
    """An unknown beta schedule name or bad schedule parameters."""


def _alpha_bar_betas(timesteps: int, alpha_bar, max_beta: float = 0.999) -> torch.Tensor:
    """Betas that discretise a continuous alpha_bar(t), t in [0, 1] (Nichol & Dhariwal 2021, eq. 17)."""
    betas = [min(1 - alpha_bar((i + 1) / timesteps) / alpha_bar(i / timesteps), max_beta) for i in range(timesteps)]
    return torch.tensor(betas, dtype=torch.float64)


def make_beta_schedule(schedule: str, timesteps: int, linear_start: float = 1e-4, linear_end: float = 2e-2,
                       cosine_s: float = 8e-3) -> torch.Tensor:
    """The [T] float64 betas of the named schedule (see the module docstring)."""
    if timesteps < 2:
        raise BetaScheduleError(f"make_beta_schedule: timesteps must be >= 2, got {timesteps}")
    if schedule == "linear":
        return torch.linspace(linear_start ** 0.5, linear_end ** 0.5, timesteps, dtype=torch.float64) ** 2
    if schedule == "sqrt_linear":
        return torch.linspace(linear_start, linear_end, timesteps, dtype=torch.float64)
    if schedule == "sqrt":
        return torch.linspace(linear_start, linear_end, timesteps, dtype=torch.float64) ** 0.5
    if schedule == "cosine":
        t = torch.arange(timesteps + 1, dtype=torch.float64) / timesteps + cosine_s
        alphas = torch.cos(t / (1 + cosine_s) * math.pi / 2).pow(2)
        alphas = alphas / alphas[0]
        return torch.clamp(1 - alphas[1:] / alphas[:-1], min=0, max=0.999)
    if schedule == "squaredcos_cap_v2":
        return _alpha_bar_betas(timesteps, lambda t: math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2)
    raise BetaScheduleError(f"make_beta_schedule: unknown schedule {schedule!r} (known: {', '.join(BETA_SCHEDULES)})")


def sigmas_from_betas(betas: torch.Tensor) -> torch.Tensor:
    """k-diffusion sigmas `sqrt((1 - alpha_bar) / alpha_bar)` of a [T] beta table, in the betas' own
    dtype as ComfyUI computes them (float64 for every named schedule)."""
    alphas_cumprod = torch.cumprod(1.0 - torch.as_tensor(betas), dim=0)
    return ((1.0 - alphas_cumprod) / alphas_cumprod) ** 0.5
