"""Colour transfer between images: match the colours of target frames to reference frames.

Behaviour as ComfyUI's `ColorTransfer` (comfy_extras/nodes_post_processing.py, 2026), written here:

- `reinhard_lab` (Reinhard et al. 2001, "Color Transfer between Images"): in CIE L*a*b*, each
  channel shifted and scaled so its mean and standard deviation (population, floored at 1e-6) are
  the reference's: `(x - mu_s) * sigma_r / sigma_s + mu_r`.
- `mkl_lab` (Pitié & Kokaram 2007, "The linear Monge-Kantorovitch linear colour mapping"): in
  L*a*b*, `T (x - mu_s) + mu_r` with `T = S^-1/2 (S^1/2 C_r S^1/2)^1/2 S^-1/2` for the source
  covariance `C_s = S` and the reference's `C_r` (eigenvalue square roots floored at 1e-6).
- `histogram`: per RGB channel, 256 bins; each source bin mapped to the first reference bin whose
  cumulative share reaches the source bin's (`searchsorted`), / 255.
- Statistics (`source_stats`): `per_frame` (each target frame's own, against the reference frame
  of the same index, the last one when the reference is shorter, or the one reference image),
  `uniform` (the target frames pooled: the mean of the frame means, and the mean of the frames'
  squared deviations / covariances about it; the reference pooled the same way; one transform for
  all frames), `target_frame` (the statistics of target frame `target_index`, clamped to the batch,
  against the pooled reference, applied to every frame).
- `strength`: the result is `lerp(source, matched, strength)` (in L*a*b* for the Lab methods,
  in RGB for `histogram`), clamped to 0..1; 0 returns the target unchanged.

The L*a*b* conversions are kornia 0.8's `rgb_to_lab` / `lab_to_rgb` (what ComfyUI calls): sRGB
companding, the sRGB / D65 XYZ matrices, the CIE f(t) with its 0.008856 threshold, clipping back
to 0..1.
"""
from __future__ import annotations

from typing import Callable

import torch

METHODS = ("reinhard_lab", "mkl_lab", "histogram")
SOURCE_STATS = ("per_frame", "uniform", "target_frame")
EPS = 1e-6
BINS = 256

_RGB_TO_XYZ = torch.tensor([[0.412453, 0.357580, 0.180423],
                            [0.212671, 0.715160, 0.072169],
                            [0.019334, 0.119193, 0.950227]])
_XYZ_TO_RGB = torch.tensor([[3.2404813432005266, -1.5371515162713185, -0.4985363261688878],
                            [-0.9692549499965682, 1.8759900014898907, 0.0415559265582928],
                            [0.0556466391351772, -0.2040413383665112, 1.0573110696453443]])
_WHITE_D65 = torch.tensor([0.95047, 1.0, 1.08883])


def rgb_to_lab(rgb: torch.Tensor) -> torch.Tensor:
    """sRGB `[..., 3, H, W]` in 0..1 -> L*a*b* `[..., 3, H, W]` (L 0..100)."""
    linear = torch.where(rgb > 0.04045, torch.pow((rgb + 0.055) / 1.055, 2.4), rgb / 12.92)
    xyz = torch.einsum("ij,...jhw->...ihw", _RGB_TO_XYZ.to(rgb), linear)
    xyz = xyz / _WHITE_D65.to(rgb).view(3, 1, 1)
    f = torch.where(xyz > 0.008856, torch.pow(xyz.clamp(min=0.008856), 1.0 / 3.0), 7.787 * xyz + 4.0 / 29.0)
    fx, fy, fz = f.unbind(-3)
    return torch.stack([116.0 * fy - 16.0, 500.0 * (fx - fy), 200.0 * (fy - fz)], dim=-3)


def lab_to_rgb(lab: torch.Tensor) -> torch.Tensor:
    """L*a*b* `[..., 3, H, W]` -> sRGB `[..., 3, H, W]` clipped to 0..1."""
    l, a, b = lab.unbind(-3)
    fy = (l + 16.0) / 116.0
    fx = a / 500.0 + fy
    fz = (fy - b / 200.0).clamp(min=0.0)
    f = torch.stack([fx, fy, fz], dim=-3)
    xyz = torch.where(f > 0.2068966, torch.pow(f, 3.0), (f - 4.0 / 29.0) / 7.787)
    xyz = xyz * _WHITE_D65.to(lab).view(3, 1, 1)
    linear = torch.einsum("ij,...jhw->...ihw", _XYZ_TO_RGB.to(lab), xyz)
    rgb = torch.where(linear > 0.0031308, 1.055 * torch.pow(linear.clamp(min=0.0031308), 1 / 2.4) - 0.055,
                      12.92 * linear)
    return rgb.clamp(0.0, 1.0)


def _lab(images: torch.Tensor, i: int) -> torch.Tensor:
    """Frame i of an IMAGE `[B, H, W, 3]` as L*a*b* planes flattened `[3, H*W]`."""
    return rgb_to_lab(images[i].to(torch.float32).permute(2, 0, 1)).reshape(3, -1)


def _frame_stats(flat: torch.Tensor, reinhard: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean `[3, 1]` and std `[3, 1]` (Reinhard) or covariance `[3, 3]` (MKL) of `[3, N]` values."""
    mean = flat.mean(dim=-1, keepdim=True)
    if reinhard:
        return mean, flat.std(dim=-1, keepdim=True, unbiased=False).clamp_min(EPS)
    centered = flat - mean
    return mean, centered @ centered.T / flat.shape[-1]


def _pooled_stats(images: torch.Tensor, reinhard: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Statistics of all frames pooled (module docstring)."""
    frames = [_lab(images, i) for i in range(images.shape[0])]
    mean = torch.stack([f.mean(dim=-1, keepdim=True) for f in frames]).mean(dim=0)
    if reinhard:
        var = torch.stack([((f - mean) ** 2).mean(dim=-1, keepdim=True) for f in frames]).mean(dim=0)
        return mean, torch.sqrt(var).clamp_min(EPS)
    return mean, torch.stack([(f - mean) @ (f - mean).T / f.shape[-1] for f in frames]).mean(dim=0)


def mkl_matrix(cov_s: torch.Tensor, cov_r: torch.Tensor) -> torch.Tensor:
    """The linear Monge-Kantorovitch map of covariance `cov_s` onto `cov_r` `[3, 3]`."""
    val_s, vec_s = torch.linalg.eigh(cov_s)
    root_s = torch.sqrt(val_s.clamp_min(0)).clamp_min(EPS)
    half_s = vec_s * root_s.unsqueeze(0)  # S^1/2 in the eigenbasis
    val_m, vec_m = torch.linalg.eigh(half_s.T @ cov_r @ half_s)
    middle = (vec_m * torch.sqrt(val_m.clamp_min(0)).unsqueeze(0)) @ vec_m.T
    inverse_half = vec_s * (1.0 / root_s).unsqueeze(0)
    return inverse_half @ middle @ inverse_half.T


def _lab_transform(target: torch.Tensor, reference: torch.Tensor, stats: str, target_index: int,
                   reinhard: bool) -> Callable[[torch.Tensor, int], torch.Tensor]:
    """`f(flat_lab [3, N], frame index) -> matched flat_lab`."""
    if stats in ("uniform", "target_frame"):
        ref_mean, ref_spread = _pooled_stats(reference, reinhard)
        if stats == "target_frame":
            src_mean, src_spread = _frame_stats(_lab(target, min(target_index, target.shape[0] - 1)), reinhard)
        else:
            src_mean, src_spread = _pooled_stats(target, reinhard)
        if reinhard:
            scale = ref_spread / src_spread
            return lambda flat, i: flat * scale + (ref_mean - scale * src_mean)
        matrix = mkl_matrix(src_spread, ref_spread)
        return lambda flat, i: matrix @ flat + (ref_mean - matrix @ src_mean)
    single = _pooled_stats(reference, reinhard) if reference.shape[0] == 1 else None

    def per_frame(flat: torch.Tensor, i: int) -> torch.Tensor:
        src_mean, src_spread = _frame_stats(flat, reinhard)
        ref_mean, ref_spread = single or _frame_stats(_lab(reference, min(i, reference.shape[0] - 1)), reinhard)
        centered = flat - src_mean
        if reinhard:
            return centered * (ref_spread / src_spread) + ref_mean
        return mkl_matrix(src_spread, ref_spread) @ centered + ref_mean
    return per_frame


def _cdf(flat: torch.Tensor) -> torch.Tensor:
    """`[C, N]` values in 0..1 -> per-channel cumulative bin shares `[C, 256]`."""
    bins = (flat * (BINS - 1)).long().clamp(0, BINS - 1)
    hist = torch.zeros(flat.shape[0], BINS, dtype=torch.float32).scatter_add_(1, bins, torch.ones_like(flat))
    cdf = hist.cumsum(1)
    return cdf / cdf[:, -1:]


def _lut(src_cdf: torch.Tensor, ref_cdf: torch.Tensor) -> torch.Tensor:
    return torch.searchsorted(ref_cdf.contiguous(), src_cdf.contiguous()).clamp_max(BINS - 1).float() / (BINS - 1)


def _planes(images: torch.Tensor, i: int) -> torch.Tensor:
    return images[i].to(torch.float32).permute(2, 0, 1).reshape(images.shape[-1], -1)


def _pooled_planes(images: torch.Tensor) -> torch.Tensor:
    return torch.cat([_planes(images, i) for i in range(images.shape[0])], dim=1)


def color_transfer(target: torch.Tensor, reference: torch.Tensor | None, method: str, stats: str = "per_frame",
                   target_index: int = 0, strength: float = 1.0) -> torch.Tensor:
    """IMAGE `target` `[B, H, W, C]` with its colours matched to `reference` `[Br, Hr, Wr, C]`
    (module docstring) -> `[B, H, W, C]` float32; the target itself when `strength` is 0 or
    there is no reference."""
    if method not in METHODS:
        raise ValueError(f"color transfer: method must be one of {METHODS}, got {method!r}")
    if stats not in SOURCE_STATS:
        raise ValueError(f"color transfer: source_stats must be one of {SOURCE_STATS}, got {stats!r}")
    if strength == 0 or reference is None:
        return target
    b, h, w, c = target.shape
    out = torch.empty(b, h, w, c, dtype=torch.float32)
    if method == "histogram":
        uniform = None
        if stats != "per_frame":
            source = target[min(target_index, b - 1)][None] if stats == "target_frame" else target
            uniform = _lut(_cdf(_pooled_planes(source)), _cdf(_pooled_planes(reference)))
        for i in range(b):
            src = _planes(target, i)
            lut = uniform
            if lut is None:
                lut = _lut(_cdf(src), _cdf(_planes(reference, min(i, reference.shape[0] - 1))))
            matched = lut.gather(1, (src * (BINS - 1)).long().clamp(0, BINS - 1))
            result = matched if strength == 1.0 else torch.lerp(src, matched, strength)
            out[i] = result.view(c, h, w).permute(1, 2, 0).clamp(0, 1)
        return out
    if c != 3 or reference.shape[-1] != 3:
        raise ValueError(f"color transfer: {method} works on RGB images, got {c} and {reference.shape[-1]} channels")
    transform = _lab_transform(target, reference, stats, target_index, reinhard=method == "reinhard_lab")
    for i in range(b):
        src = _lab(target, i)
        matched = transform(src, i)
        if strength != 1.0:
            matched = torch.lerp(src, matched, strength)
        out[i] = lab_to_rgb(matched.view(3, h, w)).permute(1, 2, 0).clamp(0, 1)
    return out
