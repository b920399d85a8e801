"""MoGe on equirectangular panoramas, after microsoft/MoGe's `scripts/infer_panorama.py` as ComfyUI's
`comfy/ldm/moge/panorama.py` runs it; written here.

1. Cameras: 12 views looking at the vertices of an icosahedron `(0, ±1, ±g)`, `(±1, ±g, 0)`,
   `(±g, 0, ±1)` (`g` the golden ratio), from the origin, up `+z` (OpenCV world->camera look-at:
   rows right = fwd x up, down = fwd x right, fwd), 90-degree FoV each (normalized intrinsics
   `fx = fy = 0.5 / tan(45 deg)`, centre 0.5).
2. Split: each view's pixel centres unprojected at unit depth, turned into equirect UV
   (`u = 1 - atan2(y, x) / 2 pi mod 1`, `v = acos(z) / pi`; z up) and sampled bilinearly
   (`grid_sample`, border padding, `align_corners=False`).
3. Merge (per resolution, coarse to fine while the long side is over 256, the coarser solution
   resized bilinearly as the starting point): each view's log distance and mask are resampled onto
   the equirect grid (bilinear / nearest, clamped to the view) where the view sees the direction;
   their forward differences (x wrapping around, y not; over the grid with the first column repeated
   at the end, as MoGe's) and 5-point Laplacians (rows edge-padded,
   columns wrapped) are averaged over the views that see both / all five pixels; the log distance
   is the least-squares solution (scipy `lsmr`, atol = btol = 1e-5) of "its differences and
   Laplacian equal those averages", exponentiated. The mask is where any view saw foreground.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

VIEW_FOV = 90.0
COARSEST = 256


def _icosahedron() -> np.ndarray:
    g = (1.0 + np.sqrt(5.0)) / 2.0
    return np.array([[0, 1, g], [0, -1, g], [0, 1, -g], [0, -1, -g], [1, g, 0], [-1, g, 0], [1, -g, 0], [-1, -g, 0],
                     [g, 0, 1], [g, 0, -1], [-g, 0, 1], [-g, 0, -1]], dtype=np.float32)


def _look_at(targets: np.ndarray, up: np.ndarray) -> np.ndarray:
    """[N, 4, 4] world->camera (OpenCV) for cameras at the origin looking at `targets` [N, 3]."""
    fwd = targets / np.linalg.norm(targets, axis=-1, keepdims=True).clip(1e-12)
    right = np.cross(fwd, up)
    norm = np.linalg.norm(right, axis=-1, keepdims=True)
    parallel = norm[:, 0] < 1e-6  # looking along `up`: any perpendicular will do
    if parallel.any():
        right = np.where(parallel[:, None], np.cross(fwd, np.array([1.0, 0.0, 0.0], dtype=np.float32)), right)
        norm = np.linalg.norm(right, axis=-1, keepdims=True)
    right = right / norm.clip(1e-12)
    down = np.cross(fwd, right)
    out = np.zeros((len(targets), 4, 4), dtype=np.float32)
    out[:, :3, :3] = np.stack([right, down, fwd], axis=-2)
    out[:, 3, 3] = 1.0
    return out


def panorama_cameras() -> tuple[np.ndarray, list[np.ndarray]]:
    """(extrinsics [12, 4, 4], 12 normalized intrinsics [3, 3]) of the split (module docstring)."""
    extrinsics = _look_at(_icosahedron(), np.array([0.0, 0.0, 1.0], dtype=np.float32))
    f = 0.5 / np.tan(np.deg2rad(VIEW_FOV) / 2)
    k = np.array([[f, 0, 0.5], [0, f, 0.5], [0, 0, 1]], dtype=np.float32)
    return extrinsics, [k] * len(extrinsics)


def pixel_uv(height: int, width: int) -> np.ndarray:
    """[H, W, 2]: pixel centres in 0..1 (u across, v down)."""
    u = (np.arange(width, dtype=np.float32) + 0.5) / width
    v = (np.arange(height, dtype=np.float32) + 0.5) / height
    return np.stack(np.meshgrid(u, v, indexing="xy"), axis=-1)


def spherical_uv_to_directions(uv: np.ndarray) -> np.ndarray:
    """Equirect UV [..., 2] -> unit directions [..., 3] (z up, u = 0 at +x going clockwise seen from above)."""
    theta = (1 - uv[..., 0]) * 2 * np.pi
    phi = uv[..., 1] * np.pi
    return np.stack([np.sin(phi) * np.cos(theta), np.sin(phi) * np.sin(theta), np.cos(phi)], axis=-1).astype(np.float32)


def directions_to_spherical_uv(directions: np.ndarray) -> np.ndarray:
    d = directions / np.linalg.norm(directions, axis=-1, keepdims=True).clip(1e-12)
    u = 1 - np.arctan2(d[..., 1], d[..., 0]) / (2 * np.pi) % 1.0
    v = np.arccos(d[..., 2].clip(-1, 1)) / np.pi
    return np.stack([u, v], axis=-1).astype(np.float32)


def _view_rays(uv: np.ndarray, extrinsics: np.ndarray, intrinsics: np.ndarray) -> np.ndarray:
    """World points at unit camera depth through the pixels `uv` [..., 2] of one view."""
    camera = np.concatenate([uv, np.ones_like(uv[..., :1])], axis=-1) @ np.linalg.inv(intrinsics).T
    rotation = extrinsics[:3, :3]
    return (camera - extrinsics[:3, 3]) @ rotation  # R^T (x - t)


def _project(points: np.ndarray, extrinsics: np.ndarray, intrinsics: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    camera = points @ extrinsics[:3, :3].T + extrinsics[:3, 3]
    depth = camera[..., 2]
    image = camera @ intrinsics.T
    return (image[..., :2] / image[..., 2:3].clip(1e-12)).astype(np.float32), depth.astype(np.float32)


def split_panorama(image: torch.Tensor, extrinsics: np.ndarray, intrinsics: Sequence[np.ndarray],
                   resolution: int) -> torch.Tensor:
    """An equirect image [3, H, W] as the views' perspective images [N, 3, R, R] (same device)."""
    uv = pixel_uv(resolution, resolution)
    sample = np.stack([directions_to_spherical_uv(_view_rays(uv, e, k)) for e, k in zip(extrinsics, intrinsics)])
    grid = torch.from_numpy(sample).to(device=image.device, dtype=image.dtype) * 2.0 - 1.0
    source = image[None].expand(len(extrinsics), -1, -1, -1).contiguous()
    return F.grid_sample(source, grid, mode="bilinear", padding_mode="border", align_corners=False)


def _sample(values: np.ndarray, pixels: np.ndarray, order: int) -> np.ndarray:
    from scipy.ndimage import map_coordinates

    height, width = values.shape[:2]
    rows = np.clip(pixels[..., 1], 0, height - 1)
    cols = np.clip(pixels[..., 0], 0, width - 1)
    return map_coordinates(values, [rows, cols], order=order, mode="nearest").astype(values.dtype)


def _difference_operator(width: int, height: int):
    """Forward differences `x[i] - x[i + 1]` along rows (wrapping) then columns (not wrapping), over the
    grid with its first column repeated after the last, as MoGe builds it (so the first column's
    vertical differences appear twice)."""
    from scipy.sparse import csr_array

    index = np.arange(height * width).reshape(height, width)
    wrapped = np.pad(index, ((0, 0), (0, 1)), mode="wrap")
    pairs = np.concatenate([np.stack([wrapped[:, :-1].ravel(), wrapped[:, 1:].ravel()], axis=1),
                            np.stack([wrapped[:-1].ravel(), wrapped[1:].ravel()], axis=1)])
    data = np.tile(np.array([1.0, -1.0], dtype=np.float32), len(pairs))
    return csr_array((data, pairs.ravel(), np.arange(0, 2 * len(pairs) + 1, 2)), shape=(len(pairs), height * width))


def _laplacian_operator(width: int, height: int):
    """The 5-point Laplacian, rows edge-padded, columns wrapped."""
    from scipy.sparse import csr_array

    index = np.arange(height * width).reshape(height, width)
    padded = np.pad(np.pad(index, ((0, 0), (1, 1)), mode="wrap"), ((1, 1), (0, 0)), mode="edge")
    columns = np.stack([padded[1:-1, 1:-1], padded[:-2, 1:-1], padded[2:, 1:-1], padded[1:-1, :-2], padded[1:-1, 2:]],
                       axis=-1).ravel()
    data = np.tile(np.array([-4, 1, 1, 1, 1], dtype=np.float32), height * width)
    return csr_array((data, columns, np.arange(0, 5 * height * width + 1, 5)), shape=(height * width, height * width))


def merge_panorama_depth(width: int, height: int, distances: Sequence[np.ndarray], masks: Sequence[np.ndarray],
                         extrinsics: Sequence[np.ndarray], intrinsics: Sequence[np.ndarray], *,
                         on_view: Callable[[], None] | None = None,
                         on_solve: Callable[[int, int], None] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(distance [H, W] float32, mask [H, W] bool) of the equirect merged from the views' distance
    maps and masks (module docstring, step 3). `on_view` is called per view resampled, `on_solve`
    after each resolution's solve."""
    from scipy.ndimage import convolve
    from scipy.sparse import vstack
    from scipy.sparse.linalg import lsmr

    start = None
    if max(width, height) > COARSEST:
        coarse, _ = merge_panorama_depth(width // 2, height // 2, distances, masks, extrinsics, intrinsics,
                                         on_view=on_view, on_solve=on_solve)
        start = F.interpolate(torch.from_numpy(coarse)[None, None], size=(height, width), mode="bilinear",
                              align_corners=False)[0, 0].numpy()
    directions = spherical_uv_to_directions(pixel_uv(height, width))
    cross = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], dtype=np.float32)
    plus = np.array([[0, 1, 0], [1, 1, 1], [0, 1, 0]], dtype=np.uint8)
    gx, gy, mx, my, laps, lap_masks, seen = [], [], [], [], [], [], []
    for distance, mask, e, k in zip(distances, masks, extrinsics, intrinsics):
        uv, depth = _project(directions, e, k)
        visible = (depth > 0) & (uv > 0).all(axis=-1) & (uv < 1).all(axis=-1)
        pixels = np.clip(uv, 0, 1) * np.array([distance.shape[1] - 1, distance.shape[0] - 1], dtype=np.float32)
        log = np.where(visible, _sample(np.log(np.clip(distance, 1e-6, None)), pixels, 1), 0.0).astype(np.float32)
        fg = visible & (_sample(mask.astype(np.uint8), pixels, 0) > 0)
        wrapped, wrapped_fg = np.pad(log, ((0, 0), (0, 1)), mode="wrap"), np.pad(fg, ((0, 0), (0, 1)), mode="wrap")
        gx.append(wrapped[:, :-1] - wrapped[:, 1:])
        gy.append(wrapped[:-1] - wrapped[1:])
        mx.append(wrapped_fg[:, :-1] & wrapped_fg[:, 1:])
        my.append(wrapped_fg[:-1] & wrapped_fg[1:])
        padded = np.pad(np.pad(log, ((1, 1), (0, 0)), mode="edge"), ((0, 0), (1, 1)), mode="wrap")
        laps.append(convolve(padded, cross)[1:-1, 1:-1])
        padded_fg = np.pad(np.pad(fg, ((1, 1), (0, 0)), mode="edge"), ((0, 0), (1, 1)), mode="wrap")
        lap_masks.append(convolve(padded_fg.astype(np.uint8), plus)[1:-1, 1:-1] == 5)
        seen.append(fg)
        if on_view is not None:
            on_view()

    def average(values: list, weights: list) -> tuple[np.ndarray, np.ndarray]:
        v, w = np.stack(values), np.stack(weights)
        return (v * w).sum(axis=0) / w.sum(axis=0).clip(1e-3), w.any(axis=0).ravel()

    gx_mean, x_rows = average(gx, mx)
    gy_mean, y_rows = average(gy, my)
    lap_mean, lap_rows = average(laps, lap_masks)
    a = vstack([_difference_operator(width, height)[np.concatenate([x_rows, y_rows])],
                _laplacian_operator(width, height)[lap_rows]])
    b = np.concatenate([gx_mean.ravel()[x_rows], gy_mean.ravel()[y_rows], lap_mean.ravel()[lap_rows]])
    x0 = None if start is None else np.log(np.clip(start, 1e-6, None)).ravel()
    solution = lsmr(a, b, atol=1e-5, btol=1e-5, x0=x0, show=False)[0]
    if on_solve is not None:
        on_solve(width, height)
    return np.exp(solution).reshape(height, width).astype(np.float32), np.any(seen, axis=0)


def merge_levels(width: int, height: int) -> list[tuple[int, int]]:
    """The (width, height) of each merge solve, coarsest first."""
    levels = [(width, height)]
    while max(levels[-1]) > COARSEST:
        levels.append((levels[-1][0] // 2, levels[-1][1] // 2))
    return levels[::-1]
