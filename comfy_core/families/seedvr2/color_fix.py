"""SeedVR2's colour corrections of a decoded frame against the resized input (ComfyUI's
comfy/ldm/seedvr/color_fix.py, after StableSR's wavelet / AdaIN colour fixes and numz's LAB path).

All take and return `[N, 3, H, W]` batches in -1..1 (the reference resized to the content's size
bilinearly when it differs):

- `wavelet_color_transfer`: five levels of a dilated 3x3 binomial blur (dilation 1, 2, 4, 8, 16,
  capped at an eighth of the shorter side, replicate padding); the content's high frequencies
  (what the blurs removed) plus the reference's low frequencies (the last blur), clamped;
- `adain_color_transfer`: each channel re-standardised to the reference's mean and standard
  deviation (population variance + 1e-5), clamped (Huang & Belongie 2017);
- `lab_color_transfer`: the wavelet transfer first, then in CIELAB (sRGB, D65): a* and b*
  histogram-matched to the reference's, L* a 0.8 / 0.2 blend of the content's and its
  histogram-matched value, back to sRGB.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

WAVELET_LEVELS = 5
LAB_DELTA = 6.0 / 29.0
LAB_KAPPA = (29.0 / 3.0) ** 3
D65_X, D65_Z = 0.95047, 1.08883
RGB_TO_XYZ = ((0.4124564, 0.3575761, 0.1804375), (0.2126729, 0.7151522, 0.0721750), (0.0193339, 0.1191920, 0.9503041))
XYZ_TO_RGB = ((3.2404542, -1.5371385, -0.4985314), (-0.9692660, 1.8760108, 0.0415560), (0.0556434, -0.2040259, 1.0572252))


def _match_size(reference: torch.Tensor, content: torch.Tensor) -> torch.Tensor:
    if reference.shape[-2:] == content.shape[-2:]:
        return reference
    return F.interpolate(reference.float(), size=content.shape[-2:], mode="bilinear",
                         align_corners=False).to(reference.dtype)


def wavelet_blur(image: torch.Tensor, radius: int) -> torch.Tensor:
    """The 3x3 binomial kernel [1 2 1]^T [1 2 1] / 16 at dilation `radius` (at most an eighth of the
    shorter side), per channel, replicate-padded."""
    radius = min(radius, max(1, min(image.shape[-2:]) // 8))
    taps = torch.tensor([1.0, 2.0, 1.0], dtype=image.dtype, device=image.device)
    kernel = (taps[:, None] * taps[None, :] / 16.0)[None, None].repeat(image.shape[1], 1, 1, 1)
    padded = F.pad(image.float(), (radius,) * 4, mode="replicate").to(image.dtype)
    return F.conv2d(padded, kernel, groups=image.shape[1], dilation=radius)


def wavelet_split(image: torch.Tensor, levels: int = WAVELET_LEVELS) -> tuple[torch.Tensor, torch.Tensor]:
    """(high, low): the sum of what each blur level removed, and the last level's blur."""
    high = torch.zeros_like(image)
    low = image
    for level in range(levels):
        blurred = wavelet_blur(low, 2 ** level)
        high = high + (low - blurred)
        low = blurred
    return high, low


def wavelet_color_transfer(content: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    reference = _match_size(reference, content)
    high, _ = wavelet_split(content)
    _, low = wavelet_split(reference)
    return (high + low).clamp(-1.0, 1.0)


def adain_color_transfer(content: torch.Tensor, reference: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    reference = _match_size(reference, content)
    c, r = content.float().flatten(2), reference.float().flatten(2)  # [N, C, HW]
    c_mean, r_mean = c.mean(-1, keepdim=True), r.mean(-1, keepdim=True)
    c_std = (c.var(-1, unbiased=False, keepdim=True) + eps).sqrt()
    r_std = (r.var(-1, unbiased=False, keepdim=True) + eps).sqrt()
    out = ((c - c_mean) / c_std * r_std + r_mean).view_as(content.float())
    return out.clamp(-1.0, 1.0).to(content.dtype)


def rgb_to_lab(rgb: torch.Tensor) -> torch.Tensor:
    """sRGB `[N, 3, H, W]` in 0..1 -> CIELAB (D65)."""
    linear = torch.where(rgb > 0.04045, ((rgb + 0.055) / 1.055) ** 2.4, rgb / 12.92)
    matrix = torch.tensor(RGB_TO_XYZ, dtype=torch.float32, device=rgb.device)
    xyz = torch.einsum("ij,njhw->nihw", matrix, linear.float())
    xyz = xyz / torch.tensor((D65_X, 1.0, D65_Z), device=rgb.device).view(1, 3, 1, 1)
    f = torch.where(xyz > LAB_DELTA ** 3, xyz.clamp_min(0.0) ** (1.0 / 3.0), (xyz * LAB_KAPPA + 16.0) / 116.0)
    return torch.stack((116.0 * f[:, 1] - 16.0, 500.0 * (f[:, 0] - f[:, 1]), 200.0 * (f[:, 1] - f[:, 2])), dim=1)


def lab_to_rgb(lab: torch.Tensor) -> torch.Tensor:
    """CIELAB (D65) -> sRGB in 0..1, clamped."""
    fy = (lab[:, 0] + 16.0) / 116.0
    f = torch.stack((fy + lab[:, 1] / 500.0, fy, fy - lab[:, 2] / 200.0), dim=1)
    xyz = torch.where(f > LAB_DELTA, f ** 3, (116.0 * f - 16.0) / LAB_KAPPA)
    xyz = xyz * torch.tensor((D65_X, 1.0, D65_Z), device=lab.device).view(1, 3, 1, 1)
    matrix = torch.tensor(XYZ_TO_RGB, dtype=torch.float32, device=lab.device)
    linear = torch.einsum("ij,njhw->nihw", matrix, xyz)
    rgb = torch.where(linear > 0.0031308, 1.055 * linear.clamp_min(0.0) ** (1.0 / 2.4) - 0.055, 12.92 * linear)
    return rgb.clamp(0.0, 1.0)


def match_histogram(source: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """Each value of `source` replaced by the reference value of the same rank (the reference's
    sorted values sampled at evenly spaced quantiles when the counts differ)."""
    flat = source.flatten()
    order = torch.argsort(flat)
    ref_sorted = torch.sort(reference.flatten()).values
    if ref_sorted.numel() != flat.numel():
        picks = (torch.linspace(0, 1, flat.numel(), device=flat.device) * (ref_sorted.numel() - 1)).long()
        ref_sorted = ref_sorted[picks.clamp(0, ref_sorted.numel() - 1)]
    out = torch.empty_like(flat)
    out[order] = ref_sorted.to(flat.dtype)
    return out.view_as(source)


def lab_color_transfer(content: torch.Tensor, reference: torch.Tensor, luminance_weight: float = 0.8) -> torch.Tensor:
    dtype = content.dtype
    content = wavelet_color_transfer(content, reference)
    reference = _match_size(reference, content)
    c_lab = rgb_to_lab(((content.float() + 1.0) / 2.0).clamp(0.0, 1.0))
    r_lab = rgb_to_lab(((reference.float() + 1.0) / 2.0).clamp(0.0, 1.0))
    lightness = c_lab[:, 0]
    if luminance_weight < 1.0:
        lightness = lightness * luminance_weight + match_histogram(c_lab[:, 0], r_lab[:, 0]) * (1.0 - luminance_weight)
    lab = torch.stack((lightness, match_histogram(c_lab[:, 1], r_lab[:, 1]), match_histogram(c_lab[:, 2], r_lab[:, 2])),
                      dim=1)
    return (lab_to_rgb(lab) * 2.0 - 1.0).to(dtype)


TRANSFERS = {"lab": lab_color_transfer, "wavelet": wavelet_color_transfer, "adain": adain_color_transfer}

__all__ = ["TRANSFERS", "adain_color_transfer", "lab_color_transfer", "lab_to_rgb", "match_histogram", "rgb_to_lab",
           "wavelet_blur", "wavelet_color_transfer", "wavelet_split"]
