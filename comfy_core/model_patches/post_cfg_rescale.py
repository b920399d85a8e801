"""Two post-CFG hooks that reshape the guided x0 prediction (`sampler_post_cfg_function(args)`).

* `TangentialAmplifyingGuidance`: Cho et al. 2025, "Tangential Amplifying Guidance"
  (arXiv 2510.04533, Algorithm 2; https://github.com/hyeon-cho/Tangential-Amplifying-Guidance),
  behaviour of today's ComfyUI node of that name (comfy_extras/nodes_tag.py,
  Comfy-Org/ComfyUI@110b1dce0c7dc9e8474b65a19c2cd67195073ff0). The step's update
  `dx = denoised - x` (the guided prediction minus the current sample) is split into its part
  along `x` (radial: `(dx . v) v`, `v = x / (|x| + 1e-8)`, per batch item over its non-singleton
  dimensions) and the rest (tangential); the result is `x + t_scale * tangential +
  r_scale * radial`. Active while `sigma_lo <= sigma <= sigma_hi` (the sigmas of `end_percent` and
  `start_percent`), the step's first sigma deciding.
* `GuidanceRescale`: diffusers' `guidance_rescale` (Lin et al. 2023, "Common Diffusion Noise
  Schedules and Sample Steps are Flawed", section 3.4), behaviour of today's ComfyUI
  `LTXVGuidanceRescale` (comfy_extras/nodes_lt.py, Comfy-Org/ComfyUI@b2f605a659b324be6dd2f5394e37c771d2f6037b):
  the guided prediction rescaled to the conditional prediction's standard deviation (per batch
  item, over every other dimension, unbiased), `rescale * rescaled + (1 - rescale) * guided`;
  nothing changes at `rescale <= 0`.

Both are plain data (frozen dataclasses with a `cache_signature`) put on a clone's
`model_options`; the maths are the pure functions below.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


def tangential_amplify(x: torch.Tensor, prev_x: torch.Tensor, t_scale: float, r_scale: float) -> torch.Tensor:
    """`prev_x + t_scale * tangential + r_scale * radial` of the update `x - prev_x` (see above)."""
    dims = tuple(d + 1 for d, size in enumerate(x.shape[1:]) if size > 1)
    direction = prev_x / (prev_x.norm(p=2, dim=dims, keepdim=True) + 1e-8)
    update = x - prev_x
    radial = (update * direction).sum(dim=dims, keepdim=True) * direction
    return prev_x + t_scale * (update - radial) + r_scale * radial


def guidance_rescale(guided: torch.Tensor, cond: torch.Tensor, rescale: float) -> torch.Tensor:
    """The guided prediction moved towards its rescale to `cond`'s standard deviation."""
    if rescale <= 0:
        return guided
    dims = list(range(1, guided.ndim))
    std_cond = cond.std(dim=dims, keepdim=True)
    std_guided = guided.std(dim=dims, keepdim=True)
    std_guided = std_guided.clamp_min(torch.finfo(std_guided.dtype).tiny)
    return rescale * (guided * (std_cond / std_guided)) + (1.0 - rescale) * guided


@dataclass(frozen=True)
class TangentialAmplifyingGuidance:
    """The TAG hook: active for `sigma_lo <= sigma <= sigma_hi`."""

    t_scale: float
    r_scale: float
    sigma_hi: float
    sigma_lo: float

    def __call__(self, args: dict) -> torch.Tensor:
        sigma = float(args["sigma"].flatten()[0])
        if not self.sigma_lo <= sigma <= self.sigma_hi:
            return args["denoised"]
        return tangential_amplify(args["denoised"], args["input"], self.t_scale, self.r_scale)

    def cache_signature(self) -> tuple:
        return ("TangentialAmplifyingGuidance", self.t_scale, self.r_scale, self.sigma_hi, self.sigma_lo)


@dataclass(frozen=True)
class GuidanceRescale:
    """The guidance-rescale hook at every step."""

    rescale: float

    def __call__(self, args: dict) -> torch.Tensor:
        return guidance_rescale(args["denoised"], args["cond_denoised"], self.rescale)

    def cache_signature(self) -> tuple:
        return ("GuidanceRescale", self.rescale)
