"""LATENT_OPERATION values: callables `operation(latent=samples, **kwargs) -> samples`, ComfyUI's
convention (comfy_extras/nodes_latent.py, 0.3.64), which LatentApplyOperation applies to a
latent and LatentApplyOperationCFG to the guidance direction inside the sampler.

The operations here are frozen value objects with a `cache_signature()`, so a MODEL patched
with one keeps its cache identity when the node re-runs with the same settings (see
comfy_core/patching/signature.py). A pack's plain function works as an operation too.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Hashable

import torch
import torch.nn.functional as F

from comfy_core.patching.signature import fingerprint

# Added to vector lengths before dividing, as ComfyUI (each operation has its own).
_TONEMAP_EPS = 1e-10
_SHARPEN_EPS = 1e-6


def gaussian_kernel(size: int, sigma: float, device: torch.device | str | None = None) -> torch.Tensor:
    """A [size, size] Gaussian, normalised to sum 1, on the grid linspace(-1, 1, size) in each
    direction (ComfyUI's nodes_post_processing.gaussian_kernel: sigma is in units of the
    half-width, not of pixels). The distance is squared after its square root, as there, so the
    floats are the same."""
    ys, xs = torch.meshgrid(torch.linspace(-1, 1, size, device=device),
                            torch.linspace(-1, 1, size, device=device), indexing="ij")
    distance = torch.sqrt(xs * xs + ys * ys)
    weights = torch.exp(-(distance * distance) / (2.0 * sigma * sigma))
    return weights / weights.sum()


@dataclass(frozen=True)
class TonemapReinhard:
    """ComfyUI's LatentOperationTonemapReinhard: the Reinhard curve `m / (m + 1)` (Reinhard et al.
    2002, "Photographic Tone Reproduction for Digital Images") on each latent pixel's vector
    length m, measured in units of `top = (5 std + mean) * multiplier` of the lengths of its batch
    item; directions are kept. Statistics are over axes 1..3, as ComfyUI."""

    multiplier: float

    def __call__(self, latent: torch.Tensor, **_: Any) -> torch.Tensor:
        magnitude = torch.linalg.vector_norm(latent, dim=1, keepdim=True) + _TONEMAP_EPS  # [B, 1, h, w]
        direction = latent / magnitude
        mean = torch.mean(magnitude, dim=(1, 2, 3), keepdim=True)
        std = torch.std(magnitude, dim=(1, 2, 3), keepdim=True)
        top = (std * 5 + mean) * self.multiplier
        scaled = magnitude * (1.0 / top)
        return direction * (scaled / (scaled + 1.0) * top)

    def cache_signature(self) -> Hashable:
        return ("TonemapReinhard", self.multiplier)


@dataclass(frozen=True)
class Sharpen:
    """ComfyUI's LatentOperationSharpen: an unsharp-mask kernel (identity plus `10 alpha` times
    the difference between the identity and a (2 radius + 1)^2 Gaussian of `sigma`) applied per
    channel to the latent's unit directions, edges mirrored; lengths are kept."""

    radius: int
    sigma: float
    alpha: float

    def __call__(self, latent: torch.Tensor, **_: Any) -> torch.Tensor:
        r = self.radius
        if latent.shape[-1] <= r or latent.shape[-2] <= r:
            raise ValueError(f"LatentOperationSharpen: sharpen_radius {r} needs a latent larger than {r} "
                             f"pixels on each side, got {latent.shape[-1]}x{latent.shape[-2]}")
        length = torch.linalg.vector_norm(latent, dim=1, keepdim=True) + _SHARPEN_EPS  # [B, 1, h, w]
        direction = latent / length
        channels = latent.shape[1]
        size = 2 * r + 1
        kernel = gaussian_kernel(size, self.sigma, device=latent.device) * (self.alpha * -10)
        kernel[r, r] = kernel[r, r] - kernel.sum() + 1.0  # the whole kernel sums to 1
        weight = kernel.to(direction.dtype).repeat(channels, 1, 1).unsqueeze(1)  # [C, 1, size, size]
        padded = F.pad(direction, (r, r, r, r), mode="reflect")
        # Convolved with zero padding and cropped back, as ComfyUI: the kept outputs never see the
        # zeros, and the same convolution call gives the same floats.
        sharpened = F.conv2d(padded, weight, padding=r, groups=channels)[:, :, r:-r, r:-r]
        return length * sharpened

    def cache_signature(self) -> Hashable:
        return ("Sharpen", self.radius, self.sigma, self.alpha)


@dataclass(frozen=True)
class OperationOnCFG:
    """A `sampler_pre_cfg_function` (LatentApplyOperationCFG) that applies `operation` to the
    guidance direction: with a positive and a negative prediction, positive becomes
    `operation(positive - negative) + negative`; with the positive alone, `operation(positive)`.
    Everything else in `conds_out` is passed through."""

    operation: Callable[..., torch.Tensor]
    # The sigma window (today's ComfyUI's start_percent / end_percent): a step whose sigma is above
    # `sigma_start` or below `sigma_end` is passed through untouched.
    sigma_start: float = math.inf
    sigma_end: float = -math.inf

    def __call__(self, args: dict) -> list:
        sigma = args.get("sigma")
        if sigma is not None and (self.sigma_start != math.inf or self.sigma_end != -math.inf):
            value = float(torch.as_tensor(sigma).reshape(-1)[0])  # the batch's first sigma, as ComfyUI
            if value > self.sigma_start or value < self.sigma_end:
                return args["conds_out"]
        conds_out = list(args["conds_out"])
        if len(conds_out) == 2:
            conds_out[0] = self.operation(latent=conds_out[0] - conds_out[1]) + conds_out[1]
        else:
            conds_out[0] = self.operation(latent=conds_out[0])
        return conds_out

    def cache_signature(self) -> Hashable | None:
        # A pack's function has an identity token while this hook holds it; None (no lasting
        # identity) only for an operation that cannot be weakly referenced.
        key, stable = fingerprint(self.operation)
        return ("OperationOnCFG", key, self.sigma_start, self.sigma_end) if stable else None
