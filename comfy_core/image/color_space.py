"""Conversions between the colour encodings of an IMAGE: sRGB, linear Rec.709, HDR (Rec.2020 with
the HLG transfer) and HDR PQ (Rec.2020 with the PQ transfer).

Behaviour of today's ComfyUI `ImageColorSpace` (comfy_extras/nodes_images.py, 2026, the version
with "linear" among its spaces), written here from the standards it follows:

* sRGB: the IEC 61966-2-1 curve (linear toe `v / 12.92` up to 0.04045, `((v + 0.055) / 1.055)^2.4`
  above; encoding: `12.92 v` up to 0.0031308, `1.055 v^(1/2.4) - 0.055` above) on Rec.709
  primaries. Values outside 0..1 follow the formulas (negative ones the toe).
* HDR: BT.2100 HLG. Decoding applies the inverse OETF (`E'^2 / 3` up to 0.5,
  `(exp((E' - c) / a) + b) / 12` above) to scene light, then the OOTF of a 1000-nit reference
  display (`Y_s^(gamma - 1)` with gamma 1.2, Y from BT.2100's Rec.2020 luma weights); encoding
  inverts both (`Y_d^(1/gamma - 1)`, then `sqrt(3E)` up to 1/12, `a ln(12E - b) + c` above).
* HDR PQ: SMPTE ST 2084 (BT.2100 PQ) with its exact rational constants, absolute: 1.0 is
  10000 cd/m².
* linear: Rec.709 primaries, linear light, 1.0 at SDR white.

Every conversion passes through display light in Rec.2020 primaries in cd/m², with SDR white
(sRGB 1.0, linear 1.0) at 203 cd/m² (BT.2408). The primaries matrices are derived here from the
Rec.709 / Rec.2020 chromaticities and D65 white; Rec.709's luma weights are the Y row of its
RGB->XYZ matrix, Rec.2020's are BT.2100's published (0.2627, 0.6780, 0.0593).

Only narrowing conversions change colours beyond the formulas: towards sRGB, and from HDR PQ to
HDR, luminance above the target's white is tone-mapped by the extended Reinhard curve
`L (1 + L / P^2) / (1 + L)` with one white point `P` (the brightest pixel) for the whole batch, so
frames of a video keep one exposure (untouched when `P` <= 1.0001, transfer round-off), and colours
outside the target gamut are pulled towards their luminance just far enough to fit 0..1 (colours
within 1e-5 of the boundary are kept), then clamped to 0..1. Conversions to linear, and from linear
or sRGB to either HDR, keep extended values. A fourth channel (straight alpha) is passed on
unchanged. The same space on both sides returns the pixels unchanged.

Computation is in float64 where the tensor's device has it (float32 elsewhere); the result is
float32. ComfyUI computes in float32 with cancellation-safe PQ forms; both agree with the
standards' float64 values to float32 precision.
"""
from __future__ import annotations

import math
from functools import lru_cache

import torch

SPACES = ("sRGB", "HDR", "HDR PQ", "linear")

SDR_WHITE_NITS = 203.0
HLG_PEAK_NITS = 1000.0
HLG_GAMMA = 1.2
PQ_PEAK_NITS = 10000.0

# BT.2100 Table 5 (HLG): a, b = 1 - 4a, c = 0.5 - a ln(4a).
HLG_A = 0.17883277
HLG_B = 1.0 - 4.0 * HLG_A
HLG_C = 0.5 - HLG_A * math.log(4.0 * HLG_A)

# SMPTE ST 2084 constants.
PQ_M1 = 2610.0 / 16384.0
PQ_M2 = 2523.0 / 4096.0 * 128.0
PQ_C1 = 3424.0 / 4096.0
PQ_C2 = 2413.0 / 4096.0 * 32.0
PQ_C3 = 2392.0 / 4096.0 * 32.0

# CIE 1931 xy of the primaries (R, G, B) and of D65.
REC709_PRIMARIES = ((0.640, 0.330), (0.300, 0.600), (0.150, 0.060))
REC2020_PRIMARIES = ((0.708, 0.292), (0.170, 0.797), (0.131, 0.046))
D65 = (0.3127, 0.3290)
REC2020_LUMA = (0.2627, 0.6780, 0.0593)

# Tone mapping is left out while the brightest pixel is within this of white; gamut compression
# keeps colours within this much of the 0..1 cube.
_PEAK_TOLERANCE = 1.0001
_GAMUT_TOLERANCE = 1e-5


class ColorSpaceError(ValueError):
    """A conversion that cannot be made (an unknown space, an image without RGB channels)."""


def _xyz(x: float, y: float) -> tuple[float, float, float]:
    return (x / y, 1.0, (1.0 - x - y) / y)


def _solve3(m: list[list[float]], v: list[float]) -> list[float]:
    """`m^-1 v` for a 3x3 matrix by Cramer's rule (float64, no torch)."""
    def det(a: list[list[float]]) -> float:
        return (a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1])
                - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0])
                + a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0]))
    d = det(m)
    out = []
    for col in range(3):
        replaced = [[v[r] if c == col else m[r][c] for c in range(3)] for r in range(3)]
        out.append(det(replaced) / d)
    return out


@lru_cache(maxsize=None)
def rgb_to_xyz_matrix(primaries: tuple[tuple[float, float], ...], white: tuple[float, float] = D65
                      ) -> tuple[tuple[float, ...], ...]:
    """The RGB->XYZ matrix of `primaries` whose RGB (1, 1, 1) is `white` at Y = 1 (SMPTE RP 177)."""
    columns = [_xyz(x, y) for x, y in primaries]
    m = [[columns[c][r] for c in range(3)] for r in range(3)]
    scale = _solve3(m, list(_xyz(*white)))
    return tuple(tuple(m[r][c] * scale[c] for c in range(3)) for r in range(3))


def _inverse(m: tuple[tuple[float, ...], ...]) -> list[list[float]]:
    cols = [_solve3([list(row) for row in m], [1.0 if i == k else 0.0 for i in range(3)]) for k in range(3)]
    return [[cols[c][r] for c in range(3)] for r in range(3)]


@lru_cache(maxsize=None)
def conversion_matrix(source: tuple[tuple[float, float], ...], target: tuple[tuple[float, float], ...]
                      ) -> tuple[tuple[float, ...], ...]:
    """Linear RGB in `source` primaries to linear RGB in `target` primaries (same white)."""
    to_xyz = rgb_to_xyz_matrix(source)
    from_xyz = _inverse(rgb_to_xyz_matrix(target))
    return tuple(tuple(sum(from_xyz[r][k] * to_xyz[k][c] for k in range(3)) for c in range(3)) for r in range(3))


def rec709_luma() -> tuple[float, float, float]:
    """Rec.709's luminance weights: the Y row of its RGB->XYZ matrix."""
    return tuple(rgb_to_xyz_matrix(REC709_PRIMARIES)[1])  # type: ignore[return-value]


# -- transfer functions (elementwise) -------------------------------------------------------------

def srgb_decode(v: torch.Tensor) -> torch.Tensor:
    """sRGB-encoded values to linear light (IEC 61966-2-1)."""
    return torch.where(v <= 0.04045, v / 12.92, ((v.clamp(min=0.0) + 0.055) / 1.055) ** 2.4)


def srgb_encode(v: torch.Tensor) -> torch.Tensor:
    """Linear light (>= 0) to sRGB-encoded values (IEC 61966-2-1)."""
    return torch.where(v <= 0.0031308, 12.92 * v, 1.055 * v.clamp(min=0.0031308) ** (1.0 / 2.4) - 0.055)


def hlg_inverse_oetf(v: torch.Tensor) -> torch.Tensor:
    """An HLG signal to scene light 0..1 (BT.2100); values above 1 extrapolate."""
    upper = (torch.exp((v.clamp(min=0.5) - HLG_C) / HLG_A) + HLG_B) / 12.0
    return torch.where(v <= 0.5, v * v / 3.0, upper)


def hlg_oetf(e: torch.Tensor) -> torch.Tensor:
    """Scene light (>= 0) to an HLG signal (BT.2100)."""
    lower = torch.sqrt(3.0 * e.clamp(min=0.0))
    upper = HLG_A * torch.log(12.0 * e.clamp(min=1.0 / 12.0) - HLG_B) + HLG_C
    return torch.where(e <= 1.0 / 12.0, lower, upper)


def pq_eotf(v: torch.Tensor) -> torch.Tensor:
    """A PQ signal to display light in cd/m² (SMPTE ST 2084); negative signals give 0."""
    p = v.clamp(min=0.0) ** (1.0 / PQ_M2)
    return (torch.clamp(p - PQ_C1, min=0.0) / (PQ_C2 - PQ_C3 * p)) ** (1.0 / PQ_M1) * PQ_PEAK_NITS


def pq_inverse_eotf(nits: torch.Tensor) -> torch.Tensor:
    """Display light in cd/m² (negative as 0) to a PQ signal (SMPTE ST 2084)."""
    y = (nits.clamp(min=0.0) / PQ_PEAK_NITS) ** PQ_M1
    return ((PQ_C1 + PQ_C2 * y) / (1.0 + PQ_C3 * y)) ** PQ_M2


# -- helpers on [..., 3] RGB -------------------------------------------------------------------------

def apply_matrix(rgb: torch.Tensor, matrix: tuple[tuple[float, ...], ...]) -> torch.Tensor:
    m = torch.tensor(matrix, dtype=rgb.dtype, device=rgb.device)
    return torch.einsum("...c,rc->...r", rgb, m)


def luminance(rgb: torch.Tensor, weights: tuple[float, ...]) -> torch.Tensor:
    """`[..., 1]` weighted sum of the channels."""
    return (rgb * torch.tensor(weights, dtype=rgb.dtype, device=rgb.device)).sum(dim=-1, keepdim=True)


def tone_map(rgb: torch.Tensor, weights: tuple[float, ...]) -> torch.Tensor:
    """Extended Reinhard on luminance with the batch's brightest pixel as white (see the module)."""
    lum = luminance(rgb, weights).clamp(min=0.0)
    peak = float(lum.max()) if lum.numel() else 0.0
    if peak <= _PEAK_TOLERANCE:
        return rgb
    return rgb * ((1.0 + lum / (peak * peak)) / (1.0 + lum))


def compress_gamut(rgb: torch.Tensor, weights: tuple[float, ...]) -> torch.Tensor:
    """Out-of-cube colours moved towards their luminance (clamped to 0..1) until they fit 0..1,
    then everything clamped to 0..1 (see the module)."""
    lum = luminance(rgb, weights).clamp(0.0, 1.0)
    low = rgb.amin(dim=-1, keepdim=True)
    high = rgb.amax(dim=-1, keepdim=True)
    tiny = torch.finfo(rgb.dtype).tiny
    room_up = (1.0 - lum) / (high - lum).clamp(min=tiny)
    room_down = lum / (lum - low).clamp(min=tiny)
    keep = torch.minimum(room_up, room_down).clamp(0.0, 1.0)
    inside = (low >= -_GAMUT_TOLERANCE) & (high <= 1.0 + _GAMUT_TOLERANCE)
    return torch.where(inside, rgb, lum + (rgb - lum) * keep).clamp(0.0, 1.0)


# -- the conversion ------------------------------------------------------------------------------------

def _work_dtype(device: torch.device) -> torch.dtype:
    return torch.float64 if device.type in ("cpu", "cuda") else torch.float32


def _to_display_nits(rgb: torch.Tensor, source: str) -> torch.Tensor:
    """Encoded pixels of `source` to display light, Rec.2020 primaries, cd/m²."""
    to_2020 = conversion_matrix(REC709_PRIMARIES, REC2020_PRIMARIES)
    if source == "sRGB":
        return apply_matrix(srgb_decode(rgb), to_2020) * SDR_WHITE_NITS
    if source == "linear":
        return apply_matrix(rgb, to_2020) * SDR_WHITE_NITS
    if source == "HDR":
        scene = hlg_inverse_oetf(rgb)
        y_s = luminance(scene, REC2020_LUMA).clamp(min=0.0)
        return scene * y_s ** (HLG_GAMMA - 1.0) * HLG_PEAK_NITS
    if source == "HDR PQ":
        return pq_eotf(rgb)
    raise ColorSpaceError(f"unknown source colour space {source!r} (known: {', '.join(SPACES)})")


def _from_display_nits(nits: torch.Tensor, source: str, destination: str) -> torch.Tensor:
    to_709 = conversion_matrix(REC2020_PRIMARIES, REC709_PRIMARIES)
    if destination == "linear":
        return apply_matrix(nits / SDR_WHITE_NITS, to_709)
    if destination == "sRGB":
        weights = rec709_luma()
        linear = tone_map(apply_matrix(nits / SDR_WHITE_NITS, to_709), weights)
        return srgb_encode(compress_gamut(linear, weights))
    if destination == "HDR":
        display = nits / HLG_PEAK_NITS
        if source == "HDR PQ":
            display = tone_map(display, REC2020_LUMA)
        y_d = luminance(display, REC2020_LUMA).clamp(min=torch.finfo(display.dtype).tiny)
        scene = display * y_d ** (1.0 / HLG_GAMMA - 1.0)
        if source == "HDR PQ":
            scene = compress_gamut(scene, REC2020_LUMA)
        return hlg_oetf(scene)
    if destination == "HDR PQ":
        return pq_inverse_eotf(nits)
    raise ColorSpaceError(f"unknown destination colour space {destination!r} (known: {', '.join(SPACES)})")


def convert_color_space(image: torch.Tensor, source: str, destination: str) -> torch.Tensor:
    """`image` `[..., C]` (C = 3, or 4 with straight alpha) from `source` to `destination` (one of
    `SPACES`), as a float32 tensor on the image's device (see the module docstring)."""
    for name in (source, destination):
        if name not in SPACES:
            raise ColorSpaceError(f"unknown colour space {name!r} (known: {', '.join(SPACES)})")
    if image.ndim < 1 or image.shape[-1] not in (3, 4):
        raise ColorSpaceError(f"an RGB or RGBA image is needed, got {image.shape[-1] if image.ndim else 0} channels")
    if source == destination:
        return image.to(torch.float32)
    rgb = image[..., :3].to(_work_dtype(image.device))
    out = _from_display_nits(_to_display_nits(rgb, source), source, destination).to(torch.float32)
    if image.shape[-1] == 4:
        out = torch.cat((out, image[..., 3:].to(torch.float32)), dim=-1)
    return out
