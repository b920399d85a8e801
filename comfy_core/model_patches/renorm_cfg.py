"""Renormalised CFG with truncation, Lumina-Image 2.0's guidance (Alpha-VLLM's Lumina-Image-2.0
`sample.py`: "CFG truncation" and "CFG renormalisation"; Qin et al. 2025, "Lumina-Image 2.0: A
Unified and Efficient Image Generative Framework"), as today's ComfyUI `RenormCFG` node installs
it (comfy_extras/nodes_lumina2.py) as the MODEL's `sampler_cfg_function`. Written here from that
behaviour.

On a call at `timestep` (ComfyUI passes sigma; the first element of the batch's is read):

- `timestep < cfg_trunc`: the first `in_channels` channels (the model's latent channels; any
  channels past them are the positive's, unguided) are guided,
  `g = uncond + cond_scale * (cond - uncond)` on the x0 predictions; with `renorm_cfg > 0`,
  when `||g|| >= renorm_cfg * ||cond||` (L2 over every dimension but the batch) `g` is scaled to
  that bound;
- otherwise (truncated) the positive's prediction is taken as it is.

The hook returns `input - result` (a `sampler_cfg_function` answers in noise space; the sampler
turns it back into `result`). ComfyUI compares the norms with a Python `if` on a one-sample
tensor, so only a batch of one is defined there; here the bound is applied per sample, which is
the same for one sample and defined for more.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from comfy_core.model_patches.errors import ModelPatchError


class RenormCFGError(ModelPatchError):
    """RenormCFG asked for with settings outside its range."""


def renorm_cfg_combine(cond: torch.Tensor, uncond: torch.Tensor, cond_scale: float, timestep: float,
                       in_channels: int, cfg_trunc: float, renorm_cfg: float) -> torch.Tensor:
    """The guided x0 prediction [B, C, ...] from the positive and negative x0 predictions (see the
    module doc)."""
    guided_in, rest = cond[:, :in_channels], cond[:, in_channels:]
    if timestep < cfg_trunc:
        uncond_in = uncond[:, :in_channels]
        guided = uncond_in + cond_scale * (guided_in - uncond_in)
        if renorm_cfg > 0.0:
            dims = tuple(range(1, guided_in.ndim))
            bound = torch.linalg.vector_norm(guided_in, dim=dims, keepdim=True) * renorm_cfg  # [B, 1, ...]
            norm = torch.linalg.vector_norm(guided, dim=dims, keepdim=True)
            guided = torch.where(norm >= bound, guided * (bound / norm), guided)
        guided_in = guided
    return torch.cat([guided_in, rest], dim=1)


@dataclass(frozen=True)
class RenormCFG:
    """`sampler_cfg_function(args) -> noise prediction` of Lumina 2's renormalised, truncated CFG
    for a network with `in_channels` latent channels."""

    cfg_trunc: float
    renorm_cfg: float
    in_channels: int

    def __post_init__(self) -> None:
        for name in ("cfg_trunc", "renorm_cfg"):
            value = getattr(self, name)
            if not 0.0 <= value <= 100.0:
                raise RenormCFGError(f"RenormCFG: {name} must be within 0..100, got {value!r}")
        if self.in_channels < 1:
            raise RenormCFGError(f"RenormCFG: the model's in_channels must be positive, got {self.in_channels!r}")

    def __call__(self, args: dict) -> torch.Tensor:
        timestep = float(args["timestep"].flatten()[0])
        result = renorm_cfg_combine(args["cond_denoised"], args["uncond_denoised"], float(args["cond_scale"]),
                                    timestep, self.in_channels, self.cfg_trunc, self.renorm_cfg)
        return args["input"] - result

    def cache_signature(self) -> tuple:
        return ("RenormCFG", self.cfg_trunc, self.renorm_cfg, self.in_channels)
