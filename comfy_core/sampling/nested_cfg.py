"""A CFG guider with one scale for the first part of a nested latent and another for the rest: LTX-2's
dual CFG (video part, audio part; ComfyUI's `Guider_LTXAVDualCFG`, comfy_extras/nodes_lt.py,
LTXVDualCFGGuider; written here).

The nested [video, audio] latent is sampled packed (`[B, 1, N]`, the video's values first:
comfy_core/latent/nested.py), so in the packed noise predictions the first `V = prod(video shape
[1:])` values are the video's. Each step, in noise space (`cond = x - cond_x0`, `uncond = x -
uncond_x0`): `out = uncond + video_cfg * (cond - uncond)` over the video values and `uncond +
audio_cfg * (cond - uncond)` over the rest; the negative pass always runs (cfg1 optimisation off),
even when a scale is 1. A latent that is not nested, or equal scales, is plain CFG at `video_cfg`.
"""
from __future__ import annotations

import math
from typing import Any

import torch

from comfy_core.latent.nested import is_nested
from comfy_core.sampling.guider import CFGGuider


def dual_cfg_noise(cond: torch.Tensor, uncond: torch.Tensor, video_values: int, video_cfg: float,
                   audio_cfg: float) -> torch.Tensor:
    """Packed noise predictions `[B, 1, N]` -> the guided one: the first `video_values` of the last
    axis at `video_cfg`, the rest at `audio_cfg`."""
    out = uncond + (cond - uncond) * video_cfg
    out[..., video_values:] = uncond[..., video_values:] + (cond[..., video_values:] - uncond[..., video_values:]) * audio_cfg
    return out


class NestedDualCFGGuider(CFGGuider):
    """See the module doc; `set_cfg(video_cfg, audio_cfg)`."""

    video_cfg = audio_cfg = 1.0
    _video_values: int | None = None

    def set_cfg(self, video_cfg: float, audio_cfg: float) -> None:  # type: ignore[override]
        self.video_cfg, self.audio_cfg = float(video_cfg), float(audio_cfg)
        self.cfg = max(self.video_cfg, self.audio_cfg)

    def sample(self, noise: Any, latent_image: Any, *args: Any, **kwargs: Any) -> Any:
        self._video_values = None
        if is_nested(latent_image):
            parts = latent_image.unbind()
            if len(parts) >= 2:
                self._video_values = math.prod(parts[0].shape[1:])
        return super().sample(noise, latent_image, *args, **kwargs)

    def predict_noise(self, x: torch.Tensor, timestep: torch.Tensor, model_options: dict | None = None,
                      seed: int | None = None) -> torch.Tensor:
        options = {} if model_options is None else model_options
        split = self._video_values
        if split is None or math.isclose(self.video_cfg, self.audio_cfg):
            self.cfg = self.video_cfg
            return super().predict_noise(x, timestep, options, seed)
        video_cfg, audio_cfg = self.video_cfg, self.audio_cfg

        def dual(args: dict) -> torch.Tensor:
            return dual_cfg_noise(args["cond"], args["uncond"], split, video_cfg, audio_cfg)

        options = {**options, "sampler_cfg_function": dual, "disable_cfg1_optimization": True}
        return super().predict_noise(x, timestep, options, seed)
