"""MoGe's camera geometry (Wang et al. 2025, "MoGe: Unlocking Accurate Monocular Geometry Estimation
for Open-Domain Images with Optimal Training Supervision", section 3.2), after microsoft/MoGe's
`utils/geometry_torch.py` / `geometry_numpy.py` as ComfyUI's `comfy/ldm/moge/geometry.py` uses
them; written here.

Conventions (OpenCV camera: x right, y down, z forward):

- the normalized view plane: `u` spans `[-a, a]` and `v` `[-b, b]` with `a = W / diag`, `b = H /
  diag` (`diag = sqrt(W^2 + H^2)`), pixel centres, so a focal `f` here is relative to half the
  image diagonal;
- the affine-invariant point map `p` predicted by the network is a true point map up to a z shift:
  `f * xy / (z + s) = uv`. `recover_focal_shift` solves `min_s |f(s) * xy / (z + s) - uv|^2` with
  `f(s)` in closed form (`<xy', uv> / <xy', xy'>`, `xy' = xy / (z + s)`) by scipy's
  `least_squares` (trust-region reflective, ftol 1e-3), or, with the focal given, `s` alone
  (Levenberg-Marquardt), on a 64 x 64 nearest-neighbour downsample of the map and its mask;
- intrinsics are normalized to the image (`cx = cy = 0.5`; `fx = f * diag / 2 / aspect`,
  `fy = f * diag / 2` in units of the width and height), and `depth_map_to_point_map` unprojects
  pixel centres `((j + 0.5) / W, (i + 0.5) / H)` through them.
"""
from __future__ import annotations

import math
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F

DOWNSAMPLE = (64, 64)


def normalized_view_plane_uv(width: int, height: int, aspect_ratio: float | None = None,
                             dtype: torch.dtype | None = None, device: torch.device | None = None) -> torch.Tensor:
    """[H, W, 2]: (u, v) of each pixel centre on the view plane (module docstring)."""
    if aspect_ratio is None:
        aspect_ratio = width / height
    span_x = aspect_ratio / math.sqrt(1 + aspect_ratio ** 2)
    span_y = 1 / math.sqrt(1 + aspect_ratio ** 2)
    u = torch.linspace(-span_x * (width - 1) / width, span_x * (width - 1) / width, width, dtype=dtype, device=device)
    v = torch.linspace(-span_y * (height - 1) / height, span_y * (height - 1) / height, height, dtype=dtype,
                       device=device)
    u, v = torch.meshgrid(u, v, indexing="xy")
    return torch.stack([u, v], dim=-1)


def _shift_residual(uv: np.ndarray, xy: np.ndarray, z: np.ndarray, focal: float | None,
                    shift: np.ndarray) -> np.ndarray:
    projected = xy / (z + shift)[:, None]
    if focal is None:  # the best focal for this shift, in closed form
        focal = (projected * uv).sum() / np.square(projected).sum()
    return (focal * projected - uv).ravel()


def solve_focal_shift(uv: np.ndarray, points: np.ndarray) -> tuple[float, float]:
    """(shift, focal) minimising the reprojection error of `points` [N, 3] onto `uv` [N, 2]."""
    from scipy.optimize import least_squares

    uv, xy, z = uv.reshape(-1, 2), points[..., :2].reshape(-1, 2), points[..., 2].reshape(-1)
    if z.size == 0:  # nothing valid: no focal (the caller falls back), no shift
        return 0.0, float("nan")
    solution = least_squares(partial(_shift_residual, uv, xy, z, None), x0=0, ftol=1e-3, method="trf")
    shift = np.float32(np.squeeze(solution["x"]))
    projected = xy / (z + shift)[:, None]
    focal = (projected * uv).sum() / np.square(projected).sum()
    return float(shift), float(focal)


def solve_shift(uv: np.ndarray, points: np.ndarray, focal: float) -> float:
    """The shift minimising the reprojection error for a known focal (0 when nothing is valid)."""
    from scipy.optimize import least_squares

    uv, xy, z = uv.reshape(-1, 2), points[..., :2].reshape(-1, 2), points[..., 2].reshape(-1)
    if z.size == 0:
        return 0.0
    solution = least_squares(partial(_shift_residual, uv, xy, z, float(focal)), x0=0, ftol=1e-3, method="lm")
    return float(np.float32(np.squeeze(solution["x"])))


def recover_focal_shift(points: torch.Tensor, mask: torch.Tensor | None = None, focal: torch.Tensor | None = None,
                        downsample: tuple[int, int] = DOWNSAMPLE) -> tuple[torch.Tensor, torch.Tensor]:
    """(focal, shift), each [...], for point maps [..., H, W, 3] (mask [..., H, W]; focal [...]
    given: only the shift is solved). Assumes the optical centre at the image centre."""
    shape = points.shape
    height, width = shape[-3], shape[-2]
    flat = points.reshape(-1, height, width, 3)
    uv = normalized_view_plane_uv(width, height, dtype=flat.dtype, device=flat.device)  # [H, W, 2]
    points_lr = F.interpolate(flat.permute(0, 3, 1, 2), downsample, mode="nearest").permute(0, 2, 3, 1)
    uv_lr = F.interpolate(uv.permute(2, 0, 1)[None], downsample, mode="nearest")[0].permute(1, 2, 0)
    mask_lr = None
    if mask is not None:
        mask_lr = F.interpolate(mask.reshape(-1, height, width).float()[:, None], downsample, mode="nearest")[:, 0] > 0
        mask_lr = mask_lr.cpu().numpy()
    points_np = points_lr.detach().float().cpu().numpy()
    uv_np = uv_lr.float().cpu().numpy()
    focal_np = None if focal is None else focal.reshape(-1).detach().float().cpu().numpy()
    shifts, focals = [], []
    for i in range(points_np.shape[0]):
        pts, uvs = (points_np[i], uv_np) if mask_lr is None else (points_np[i][mask_lr[i]], uv_np[mask_lr[i]])
        if focal_np is None:
            shift, f = solve_focal_shift(uvs, pts)
            focals.append(f)
        else:
            shift = solve_shift(uvs, pts, focal_np[i])
        shifts.append(shift)
    shift_t = torch.tensor(shifts, device=points.device, dtype=points.dtype).reshape(shape[:-3])
    if focal is None:
        focal_t = torch.tensor(focals, device=points.device, dtype=points.dtype).reshape(shape[:-3])
    else:
        focal_t = focal.reshape(shape[:-3])
    return focal_t, shift_t


def intrinsics_from_focal_center(fx: torch.Tensor, fy: torch.Tensor, cx: torch.Tensor | float,
                                 cy: torch.Tensor | float) -> torch.Tensor:
    """[..., 3, 3] OpenCV intrinsics `[[fx, 0, cx], [0, fy, cy], [0, 0, 1]]`."""
    fx, fy, cx, cy = torch.broadcast_tensors(*(torch.as_tensor(v, dtype=torch.as_tensor(fx).dtype,
                                                               device=torch.as_tensor(fx).device)
                                               for v in (fx, fy, cx, cy)))
    zero, one = torch.zeros_like(fx), torch.ones_like(fx)
    return torch.stack([torch.stack([fx, zero, cx], -1), torch.stack([zero, fy, cy], -1),
                        torch.stack([zero, zero, one], -1)], dim=-2)


def depth_map_to_point_map(depth: torch.Tensor, intrinsics: torch.Tensor) -> torch.Tensor:
    """[..., H, W, 3]: pixel centres of `depth` [..., H, W] unprojected through normalized
    `intrinsics` [..., 3, 3]."""
    height, width = depth.shape[-2:]
    u = (torch.arange(width, dtype=depth.dtype, device=depth.device) + 0.5) / width
    v = (torch.arange(height, dtype=depth.dtype, device=depth.device) + 0.5) / height
    fx, fy = intrinsics[..., 0, 0, None, None], intrinsics[..., 1, 1, None, None]
    cx, cy = intrinsics[..., 0, 2, None, None], intrinsics[..., 1, 2, None, None]
    x = (u[None, :] - cx) / fx * depth
    y = (v[:, None] - cy) / fy * depth
    return torch.stack([x, y, depth], dim=-1)


def depth_edges(depth: torch.Tensor, rtol: float, kernel: int = 3) -> torch.Tensor:
    """[..., H, W] bool: where the depth's span (max - min) over the `kernel` window exceeds
    `rtol` times the depth (utils3d's `depth_edge` with a relative tolerance)."""
    shape = depth.shape
    d = depth.reshape(-1, 1, *shape[-2:])
    pad = kernel // 2
    span = F.max_pool2d(d, kernel, stride=1, padding=pad) + F.max_pool2d(-d, kernel, stride=1, padding=pad)
    return (torch.nan_to_num(span / d.clamp_min(1e-6)) > rtol).reshape(shape)


def triangulate_grid_mesh(points: torch.Tensor, mask: torch.Tensor | None = None, decimation: int = 1,
                          discontinuity_threshold: float = 0.04,
                          depth: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A point map [H, W, 3] as a triangle mesh, on the CPU, as ComfyUI's MoGe meshing makes it:
    (vertices [N, 3], faces [M, 3] int64, uvs [N, 2]).

    A pixel is a vertex when its point is finite (and in `mask`), and, with a threshold, not on a
    depth edge (`depth_edges` of `depth`, default z; non-finite depths read as 0); then every
    `decimation`-th row and column is kept. Each grid quad whose four corners are vertices gives
    the triangles (a, b, c) and (a, c, d), a/b the top-left/top-right, c/d the bottom-right/left
    corners. The UV of pixel (i, j) is (j / (W - 1), i / (H - 1)) on the kept grid."""
    points = points.detach().float().cpu()
    finite = torch.isfinite(points).all(dim=-1)
    keep = finite if mask is None else finite & mask.detach().cpu().bool()
    if discontinuity_threshold > 0:
        d = depth.detach().float().cpu() if depth is not None else points[..., 2]
        keep = keep & ~depth_edges(torch.where(finite, d, torch.zeros_like(d)), discontinuity_threshold)
    if decimation > 1:
        points = points[::decimation, ::decimation].contiguous()
        keep = keep[::decimation, ::decimation].contiguous()
    height, width = keep.shape
    flat = keep.reshape(-1)
    index = torch.full((height * width,), -1, dtype=torch.long)
    index[flat] = torch.arange(int(flat.sum()), dtype=torch.long)
    index = index.reshape(height, width)
    vertices = points.reshape(-1, 3)[flat].contiguous()
    rows, cols = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
    uvs = torch.stack([cols.float() / max(width - 1, 1), rows.float() / max(height - 1, 1)], dim=-1)
    uvs = uvs.reshape(-1, 2)[flat].contiguous()
    a, b, c, d = index[:-1, :-1], index[:-1, 1:], index[1:, 1:], index[1:, :-1]
    whole = (a >= 0) & (b >= 0) & (c >= 0) & (d >= 0)
    a, b, c, d = a[whole], b[whole], c[whole], d[whole]
    faces = torch.cat([torch.stack([a, b, c], dim=-1), torch.stack([a, c, d], dim=-1)], dim=0).contiguous()
    return vertices, faces, uvs
