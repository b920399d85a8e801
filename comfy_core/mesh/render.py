"""One view of a triangle mesh: behaviour of today's ComfyUI's RenderMesh (`_render_view`,
`_camera_basis`, `_apply_model_transform` in comfy_extras/nodes_mesh_postprocess.py); written
here. ComfyUI casts one ray per pixel through a BVH; this module gets the same nearest hits by
rasterising the triangles in screen space with a depth test (pixel centres, perspective-correct
interpolation), which for a pinhole camera is the same visibility question.

Camera: `eye`, looking at `target`, up +Y (+Z when looking nearly straight up or down), vertical
field of view `fov` (radians). Pixel (row i, column j) looks along
r * x * tan(fov/2) * W/H + u * y * tan(fov/2) + f with x = (j + 0.5) / W * 2 - 1 and
y = 1 - (i + 0.5) / H * 2. Triangles with a corner behind the eye are not drawn.
"""
from __future__ import annotations

import math

import torch

TILE = 64


def camera_basis(eye: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(forward, right, up) of a camera at `eye` looking at `target`."""
    f = torch.nn.functional.normalize(target - eye, dim=-1, eps=1e-6)
    up = torch.tensor([0.0, 1.0, 0.0], dtype=f.dtype)
    if float((f * up).sum().abs()) >= 0.99:
        up = torch.tensor([0.0, 0.0, 1.0], dtype=f.dtype)
    r = torch.nn.functional.normalize(torch.linalg.cross(f, up), dim=-1, eps=1e-6)
    return f, r, torch.linalg.cross(r, f)


def quaternion_xyzw_matrix(x: float, y: float, z: float, w: float) -> torch.Tensor:
    return torch.tensor([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                         [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                         [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


def apply_model_transform(values: torch.Tensor, transform: dict, is_normal: bool = False) -> torch.Tensor:
    """A viewer's model transform ({"position", "quaternion", "scale"}, each {"x", "y", "z"[, "w"]}):
    points scaled, rotated, moved; normals divided by the scale, rotated, renormalised."""
    def vec(d):
        return torch.tensor([float(d["x"]), float(d["y"]), float(d["z"])], dtype=values.dtype)

    q = transform["quaternion"]
    rotation = quaternion_xyzw_matrix(*(float(q[k]) for k in ("x", "y", "z", "w"))).to(values.dtype)
    if is_normal:
        return torch.nn.functional.normalize((values / vec(transform["scale"])) @ rotation.T, dim=-1, eps=1e-6)
    return (values * vec(transform["scale"])) @ rotation.T + vec(transform["position"])


def rasterize(vertices: torch.Tensor, faces: torch.Tensor, eye: torch.Tensor, f: torch.Tensor, r: torch.Tensor,
              u: torch.Tensor, fov: float, height: int, width: int):
    """Per pixel: the nearest face (-1 for none), perspective-correct barycentrics [H, W, 3] and
    the distance from the eye along the pixel's ray (inf where nothing is hit)."""
    tn = math.tan(0.5 * fov)
    aspect = width / height
    rel = vertices.double() - eye.double()
    xc, yc, zc = rel @ r.double(), rel @ u.double(), rel @ f.double()
    fl = faces.long()
    in_front = (zc[fl] > 1e-5).all(1)
    zsafe = zc.clamp_min(1e-12)
    px = ((xc / (zsafe * tn * aspect)) + 1) / 2 * width - 0.5  # pixel-centre coordinates
    py = (1 - yc / (zsafe * tn)) / 2 * height - 0.5
    x0, x1, x2 = px[fl[:, 0]], px[fl[:, 1]], px[fl[:, 2]]
    y0, y1, y2 = py[fl[:, 0]], py[fl[:, 1]], py[fl[:, 2]]
    area = (x1 - x0) * (y2 - y0) - (x2 - x0) * (y1 - y0)
    usable = in_front & (area.abs() > 1e-12)
    xmin = torch.minimum(torch.minimum(x0, x1), x2).floor().clamp(0, width - 1).long()
    xmax = torch.maximum(torch.maximum(x0, x1), x2).ceil().clamp(0, width - 1).long()
    ymin = torch.minimum(torch.minimum(y0, y1), y2).floor().clamp(0, height - 1).long()
    ymax = torch.maximum(torch.maximum(y0, y1), y2).ceil().clamp(0, height - 1).long()
    inv_z = 1.0 / zsafe
    face = torch.full((height, width), -1, dtype=torch.long)
    bary = torch.zeros((height, width, 3), dtype=torch.float64)
    depth = torch.full((height, width), float("inf"), dtype=torch.float64)
    for ty in range(0, height, TILE):
        te = min(ty + TILE, height)
        for tx in range(0, width, TILE):
            xe = min(tx + TILE, width)
            idx = torch.nonzero(usable & (xmin < xe) & (xmax >= tx) & (ymin < te) & (ymax >= ty), as_tuple=True)[0]
            if idx.numel() == 0:
                continue
            yy, xx = torch.meshgrid(torch.arange(ty, te, dtype=torch.float64),
                                    torch.arange(tx, xe, dtype=torch.float64), indexing="ij")
            a0, a1, a2 = x0[idx, None, None], x1[idx, None, None], x2[idx, None, None]
            b0, b1, b2 = y0[idx, None, None], y1[idx, None, None], y2[idx, None, None]
            den = area[idx, None, None]
            w0 = ((a1 - xx) * (b2 - yy) - (a2 - xx) * (b1 - yy)) / den
            w1 = ((a2 - xx) * (b0 - yy) - (a0 - xx) * (b2 - yy)) / den
            w2 = 1.0 - w0 - w1
            inside = (w0 >= -1e-9) & (w1 >= -1e-9) & (w2 >= -1e-9)
            if not bool(inside.any()):
                continue
            iz = fl[idx]
            p0 = w0 * inv_z[iz[:, 0], None, None]
            p1 = w1 * inv_z[iz[:, 1], None, None]
            p2 = w2 * inv_z[iz[:, 2], None, None]
            total = p0 + p1 + p2  # 1 / depth along f at the pixel
            zf = torch.where(inside, 1.0 / total, torch.full_like(total, float("inf")))
            best, which = zf.min(dim=0)
            hit = torch.isfinite(best)
            if not bool(hit.any()):
                continue
            sel = which[None]
            pb = torch.stack([p0.gather(0, sel)[0], p1.gather(0, sel)[0], p2.gather(0, sel)[0]], -1)
            pb = pb / pb.sum(-1, keepdim=True)
            gx = (xx + 0.5) / width * 2 - 1
            gy = 1 - (yy + 0.5) / height * 2
            ray_len = torch.sqrt((gx * tn * aspect) ** 2 + (gy * tn) ** 2 + 1.0)
            face[ty:te, tx:xe] = torch.where(hit, idx[which], -1)
            bary[ty:te, tx:xe] = torch.where(hit[..., None], pb, 0.0)
            depth[ty:te, tx:xe] = torch.where(hit, best * ray_len, float("inf"))
    return face, bary.float(), depth.float()


def pixel_directions(f, r, u, fov: float, height: int, width: int) -> torch.Tensor:
    """Unit ray directions [H, W, 3]."""
    tn = math.tan(0.5 * fov)
    ys = 1.0 - (torch.arange(height, dtype=torch.float32) + 0.5) / height * 2.0
    xs = (torch.arange(width, dtype=torch.float32) + 0.5) / width * 2.0 - 1.0
    gy, gx = torch.meshgrid(ys, xs, indexing="ij")
    d = r * (gx * tn * width / height)[..., None] + u * (gy * tn)[..., None] + f
    return torch.nn.functional.normalize(d, dim=-1, eps=1e-6)


def sample_image(image: torch.Tensor, uv: torch.Tensor) -> torch.Tensor:
    """Bilinear samples [K, C] of `image` [H, W, C] at `uv` [K, 2] in 0..1 (u across, v down), edges clamped."""
    grid = (uv * 2.0 - 1.0).view(1, 1, -1, 2).float()
    out = torch.nn.functional.grid_sample(image.permute(2, 0, 1)[None].float(), grid, mode="bilinear",
                                          align_corners=False, padding_mode="border")
    return out[0, :, 0, :].t()


def render_view(vertices, faces, eye, target, fov: float, height: int, width: int, *, uvs=None, texture=None,
                vertex_colors=None, vertex_normals=None, render_normal: bool = False):
    """(colour [H, W, 3], hit mask [H, W], distance [H, W]) of one view; the colour of a hit pixel
    is the view-space normal encoded 0..1 (`render_normal`: interpolated `vertex_normals`, else the
    face normal turned to the camera), else the texture at the interpolated uv, else the
    interpolated vertex colour, else clay 0.72 shaded by |normal . ray| (at least 0.15)."""
    f, r, u = camera_basis(eye.float(), target.float())
    face, bary, depth = rasterize(vertices, faces, eye, f, r, u, fov, height, width)
    hit = face >= 0
    image = torch.zeros((height, width, 3))
    if not bool(hit.any()):
        return image, hit, depth
    fh = face[hit]
    b = bary[hit]
    fl = faces.long()
    corners = fl[fh]
    d = pixel_directions(f, r, u, fov, height, width)[hit]
    v = vertices.float()
    tri = v[corners]
    face_n = torch.nn.functional.normalize(torch.linalg.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]),
                                           dim=-1, eps=1e-6)

    def interp(values):
        return (b[:, :, None] * values.float()[corners]).sum(1)

    if render_normal:
        if vertex_normals is not None:
            n = torch.nn.functional.normalize(interp(vertex_normals), dim=-1, eps=1e-6)
        else:
            n = torch.where((face_n * -d).sum(-1, keepdim=True) < 0, -face_n, face_n)
        view = torch.stack([(n * r).sum(-1), (n * u).sum(-1), (n * -f).sum(-1)], -1)
        colour = (view * 0.5 + 0.5).clamp(0.0, 1.0)
    elif texture is not None and uvs is not None:
        colour = sample_image(texture, interp(uvs))
    elif vertex_colors is not None:
        colour = interp(vertex_colors)
    else:
        ndl = (face_n * -d).sum(-1).abs().clamp(0.15, 1.0)
        colour = torch.tensor([0.72, 0.72, 0.72]) * ndl[:, None]
    image[hit] = colour.float()
    return image, hit, depth
