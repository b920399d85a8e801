"""Guidance patches: the CFG hooks ComfyUI's guidance nodes install on a MODEL.

Each is a small value object called with ComfyUI's hook `args` (see `comfy_core/sampling/cfg.py`):
a `sampler_cfg_function` works in noise space (`cond`/`uncond` are `x - x0`) and returns a noise
prediction; a `sampler_post_cfg_function` gets the guided x0 prediction as `denoised` and returns
a new one; a `sampler_pre_cfg_function` maps `conds_out` ([positive x0, negative x0, ...]).
Settings are data, so equal settings give equal `cache_signature()`s.

The maths follows ComfyUI 0.3.64's comfy_extras (nodes_model_advanced.RescaleCFG, nodes_cfg,
nodes_apg, nodes_mahiro, nodes_tcfg, nodes_eps), keeping its order of floating-point operations so
results agree bit for bit; the papers are cited per class.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F


def _per_sample(sigma: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return sigma.view(sigma.shape[:1] + (1,) * (like.ndim - 1))


@dataclass(frozen=True)
class RescaleCFG:
    """`sampler_cfg_function` of Lin et al. 2023 ("Common Diffusion Noise Schedules and Sample
    Steps are Flawed", sec. 3.4): CFG on v predictions, then the result's per-sample std rescaled
    to the positive's, blended by `multiplier` (phi) with plain CFG."""

    multiplier: float

    def __call__(self, args: dict) -> torch.Tensor:
        cond_eps, uncond_eps = args["cond"], args["uncond"]
        scale = args["cond_scale"]
        x_in = args["input"]
        s = _per_sample(args["sigma"], cond_eps)
        # The eps/x0 outputs seen as v predictions of the VP-scaled input x / (sigma^2 + 1).
        x = x_in / (s * s + 1.0)
        cond = ((x - (x_in - cond_eps)) * (s ** 2 + 1.0) ** 0.5) / s
        uncond = ((x - (x_in - uncond_eps)) * (s ** 2 + 1.0) ** 0.5) / s
        guided = uncond + scale * (cond - uncond)
        std_pos = torch.std(cond, dim=(1, 2, 3), keepdim=True)
        std_cfg = torch.std(guided, dim=(1, 2, 3), keepdim=True)
        rescaled = guided * (std_pos / std_cfg)
        final = self.multiplier * rescaled + (1.0 - self.multiplier) * guided
        return x_in - (x - final * s / (s * s + 1.0) ** 0.5)

    def cache_signature(self) -> tuple:
        return ("RescaleCFG", self.multiplier)


def optimized_scale(positive: torch.Tensor, negative: torch.Tensor) -> torch.Tensor:
    """Per-sample `<p, n> / (|n|^2 + 1e-8)`, shaped [B, 1, ...]: the projection coefficient of
    CFG-Zero* (Fan et al. 2025, "CFG-Zero*: Improved Classifier-Free Guidance for Flow Matching")."""
    p = positive.reshape(positive.shape[0], -1)
    n = negative.reshape(negative.shape[0], -1)
    dot = torch.sum(p * n, dim=1, keepdim=True)
    norm2 = torch.sum(n ** 2, dim=1, keepdim=True) + 1e-8
    return (dot / norm2).reshape([positive.shape[0]] + [1] * (positive.ndim - 1))


@dataclass(frozen=True)
class CFGZeroStar:
    """Post-CFG hook: guidance from the negative scaled by the optimised `alpha` (the projection
    of the positive noise prediction on the negative one): `uncond*alpha + s*(cond - uncond*alpha)`,
    written as a correction of the plain CFG result."""

    def __call__(self, args: dict) -> torch.Tensor:
        scale = args["cond_scale"]
        x = args["input"]
        cond, uncond = args["cond_denoised"], args["uncond_denoised"]
        alpha = optimized_scale(x - cond, x - uncond)
        return args["denoised"] + uncond * (alpha - 1.0) + scale * uncond * (1.0 - alpha)

    def cache_signature(self) -> tuple:
        return ("CFGZeroStar",)


@dataclass(frozen=True)
class CFGNorm:
    """Post-CFG hook: the guided prediction's per-pixel channel norm capped at the positive's
    (scale `min(1, |cond| / (|cfg| + 1e-8))` over dim 1), times `strength`."""

    strength: float

    def __call__(self, args: dict) -> torch.Tensor:
        guided = args["denoised"]
        norm_cond = torch.norm(args["cond_denoised"], dim=1, keepdim=True)
        norm_guided = torch.norm(guided, dim=1, keepdim=True)
        scale = (norm_cond / (norm_guided + 1e-8)).clamp(min=0.0, max=1.0)
        out = guided * scale * self.strength
        # Above 1 the strength amplifies the prediction on every step and can run out of the dtype's
        # range; today's ComfyUI stops with an error naming the input instead of rendering NaNs.
        if self.strength > 1.0 and not torch.isfinite(out).all():
            raise RuntimeError(f"CFGNorm: strength={self.strength} made the denoised prediction non-finite (a "
                               "strength above 1.0 amplifies the prediction on every sampling step); use a "
                               "strength of at most 1.0")
        return out

    def cache_signature(self) -> tuple:
        return ("CFGNorm", self.strength)


@dataclass(frozen=True)
class CFGNormPreCFG:
    """`sampler_cfg_function` of CFGNorm with `pre_cfg` (today's ComfyUI, comfy_extras/nodes_cfg.py
    `cfg_norm_pre`): plain CFG on the noise predictions, `comb = uncond + s * (cond - uncond)`, then
    rescaled per pixel so its channel norm (dim 1) is the positive's, `comb * |cond| / |comb|`
    (a zero `comb` left as is), unclamped, so it may amplify (the norm-scaled CFG of models like
    Lens); `strength` blends back toward plain CFG: `strength * rescaled + (1 - strength) * comb`."""

    strength: float

    def __call__(self, args: dict) -> torch.Tensor:
        cond, uncond = args["cond"], args["uncond"]
        comb = uncond + args["cond_scale"] * (cond - uncond)
        cond_norm = torch.linalg.vector_norm(cond, dim=1, keepdim=True)
        comb_norm = torch.linalg.vector_norm(comb, dim=1, keepdim=True)
        rescale = torch.where(comb_norm > 0, cond_norm / comb_norm.clamp_min(1e-12), torch.ones_like(comb_norm))
        rescaled = comb * rescale
        if self.strength != 1.0:
            rescaled = self.strength * rescaled + (1.0 - self.strength) * comb
        return rescaled

    def cache_signature(self) -> tuple:
        return ("CFGNormPreCFG", self.strength)


def project(v0: torch.Tensor, v1: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`v0`'s components parallel and orthogonal to `v1`, per sample over the last three dims."""
    unit = F.normalize(v1, dim=[-1, -2, -3])
    parallel = (v0 * unit).sum(dim=[-1, -2, -3], keepdim=True) * unit
    return parallel, v0 - parallel


@dataclass
class APG:
    """Pre-CFG hook of Adaptive Projected Guidance (Sadat et al. 2024, "Eliminating
    Oversaturation and Artifacts of High Guidance Scales in Diffusion Models"): the guidance
    `cond - uncond` (optionally a momentum running average, reset when sigma rises: a new run;
    optionally capped at L2 norm `norm_threshold`) is split into parts parallel and orthogonal to
    the positive prediction, the parallel part scaled by `eta`. The positive is rewritten so that
    the ordinary CFG combination afterwards yields `uncond + cond_scale * modified + (cond - uncond)`.

    Stateful (the running average), like ComfyUI's closure; copies of a MODEL share it.
    """

    eta: float
    norm_threshold: float
    momentum: float
    running_avg: Any = field(default=0, repr=False)
    prev_sigma: Any = field(default=None, repr=False)

    def __deepcopy__(self, memo: dict) -> "APG":
        return self  # a patcher clone keeps the same hook (and running average), as ComfyUI's closure

    def __call__(self, args: dict) -> list:
        conds_out = args["conds_out"]
        if len(conds_out) == 1:
            return conds_out
        cond, uncond = conds_out[0], conds_out[1]
        sigma = args["sigma"][0]
        scale = args["cond_scale"]
        if self.prev_sigma is not None and sigma > self.prev_sigma:
            self.running_avg = 0
        self.prev_sigma = sigma
        guidance = cond - uncond
        if self.momentum != 0:
            if not torch.is_tensor(self.running_avg):
                self.running_avg = guidance
            else:
                self.running_avg = self.momentum * self.running_avg + guidance
            guidance = self.running_avg
        if self.norm_threshold > 0:
            norm = guidance.norm(p=2, dim=[-1, -2, -3], keepdim=True)
            guidance = guidance * torch.minimum(torch.ones_like(norm), self.norm_threshold / norm)
        parallel, orthogonal = project(guidance, cond)
        modified = orthogonal + self.eta * parallel
        new_cond = (uncond + modified) + (cond - uncond) / scale
        return [new_cond, uncond] + list(conds_out[2:])


@dataclass(frozen=True)
class Mahiro:
    """Post-CFG hook (ComfyUI's nodes_mahiro): blend the CFG result with the "naive leap"
    `cond * scale` by the cosine similarity of the signed-sqrt uncond leap and the mean of leap
    and CFG result: `(w*cfg + (4-w)*leap) / 4`, `w = 2 * (sim + 1)`."""

    def __call__(self, args: dict) -> torch.Tensor:
        scale = args["cond_scale"]
        leap = args["cond_denoised"] * scale
        u_leap = args["uncond_denoised"] * scale
        guided = args["denoised"]
        merge = (leap + guided) / 2
        norm_u = torch.sqrt(u_leap.abs()) * u_leap.sign()
        norm_m = torch.sqrt(merge.abs()) * merge.sign()
        sim = F.cosine_similarity(norm_u, norm_m).mean()
        weight = 2 * (sim + 1)
        return (weight * guided + (4 - weight) * leap) / 4

    def cache_signature(self) -> tuple:
        return ("Mahiro",)


def score_tangential_damping(cond_score: torch.Tensor, uncond_score: torch.Tensor) -> torch.Tensor:
    """The negative score projected on the first right-singular vector of the per-sample 2 x N
    matrix [uncond; cond] (TCFG, Kwon et al. 2025, arXiv 2503.18137): its tangential part dropped."""
    b = cond_score.shape[0]
    cond_flat = cond_score.reshape(b, 1, -1).float()
    uncond_flat = uncond_score.reshape(b, 1, -1).float()
    matrix = torch.cat((uncond_flat, cond_flat), dim=1)  # [B, 2, N]
    try:
        _, _, vh = torch.linalg.svd(matrix, full_matrices=False)
    except RuntimeError:  # some accelerator SVDs fail: the CPU one does not
        _, _, vh = torch.linalg.svd(matrix.cpu(), full_matrices=False)
    v1 = vh[:, 0:1, :].to(uncond_flat.device)  # [B, 1, N]
    damped = (uncond_flat @ v1.transpose(-2, -1)) * v1
    return damped.reshape_as(uncond_score).to(uncond_score.dtype)


@dataclass(frozen=True)
class TCFG:
    """Pre-CFG hook: the negative prediction replaced by its tangentially damped version
    (in noise space); skipped when either prediction is absent."""

    def __call__(self, args: dict) -> list:
        conds_out = args["conds_out"]
        if len(conds_out) <= 1 or None in args["conds"][:2]:
            return conds_out
        x = args["input"]
        cond, uncond = conds_out[0], conds_out[1]
        damped = score_tangential_damping(x - cond, x - uncond)
        return [cond, x - damped] + list(conds_out[2:])

    def cache_signature(self) -> tuple:
        return ("TCFG",)


@dataclass(frozen=True)
class EpsilonScaling:
    """Post-CFG hook of Epsilon Scaling (Ning et al. 2024, "Elucidating the Exposure Bias in
    Diffusion Models", uniform schedule): the guided noise prediction `x - denoised` divided by
    `scaling_factor`."""

    scaling_factor: float

    def __call__(self, args: dict) -> torch.Tensor:
        x = args["input"]
        return x - (x - args["denoised"]) / self.scaling_factor

    def cache_signature(self) -> tuple:
        return ("EpsilonScaling", self.scaling_factor)
