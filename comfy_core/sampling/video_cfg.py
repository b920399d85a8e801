"""Per-frame CFG scales for video models: the `sampler_cfg_function`s of ComfyUI 0.3.64's
VideoLinearCFGGuidance and VideoTriangleCFGGuidance (comfy_extras/nodes_video_model.py).

A video latent is a batch of frames, so the guidance scale can vary along the batch: frame `i`
of `n` gets `uncond + s_i * (cond - uncond)` (in noise space, as every `sampler_cfg_function`),
with `s_i` rising linearly from `min_cfg` on the first frame to the sampler's cfg on the last
(linear), or following a triangle wave, `min_cfg` on the first and last frames and cfg in the
middle (triangle: `s_i = min_cfg + (cfg - min_cfg) * 2|u - floor(u + 1/2)|`, `u = i / (n - 1)`,
a wave of period 1). The operations are ComfyUI's, in its order (float32 `linspace`), so results
agree bit for bit. Settings are data: equal settings give equal `cache_signature()`s.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


def linear_scales(min_cfg: float, cfg: float, frames: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """`[frames, 1, 1, 1]`: min_cfg .. cfg, evenly spaced."""
    return torch.linspace(min_cfg, cfg, frames, device=device).reshape((frames, 1, 1, 1))


def triangle_scales(min_cfg: float, cfg: float, frames: int, device: torch.device | str = "cpu",
                    period: float = 1.0) -> torch.Tensor:
    """`[frames, 1, 1, 1]`: a triangle wave from min_cfg (ends) to cfg (middle)."""
    u = torch.linspace(0, 1, frames, device=device)
    wave = 2 * (u / period - torch.floor(u / period + 0.5)).abs()
    return (wave * (cfg - min_cfg) + min_cfg).reshape((frames, 1, 1, 1))


@dataclass(frozen=True)
class VideoLinearCFG:
    """`sampler_cfg_function`: CFG with `linear_scales` along the batch (frames)."""

    min_cfg: float

    def __call__(self, args: dict) -> torch.Tensor:
        cond, uncond = args["cond"], args["uncond"]
        scale = linear_scales(self.min_cfg, args["cond_scale"], cond.shape[0], cond.device)
        return uncond + scale * (cond - uncond)

    def cache_signature(self) -> tuple:
        return ("VideoLinearCFG", self.min_cfg)


@dataclass(frozen=True)
class VideoTriangleCFG:
    """`sampler_cfg_function`: CFG with `triangle_scales` along the batch (frames)."""

    min_cfg: float

    def __call__(self, args: dict) -> torch.Tensor:
        cond, uncond = args["cond"], args["uncond"]
        scale = triangle_scales(self.min_cfg, args["cond_scale"], cond.shape[0], cond.device)
        return uncond + scale * (cond - uncond)

    def cache_signature(self) -> tuple:
        return ("VideoTriangleCFG", self.min_cfg)
