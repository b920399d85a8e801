"""Narrow-band dual-contouring remesh: behaviour of today's ComfyUI's RemeshMesh
(`remesh_narrow_band_dc` in comfy_extras/mesh3d/postprocess/remesh.py, itself an approximation of
CuMesh's remesher); written here, in its "udf" and "sdf" sign modes.

1. The grid: `resolution`³ cells over a cube of side `scale` about `center`. Long input triangles
   are bisected (no edge over 4 cells) so a nearest-centroid search finds the closest triangle.
2. The band: starting from a coarse grid (the resolution halved while even and above 32), the
   cells whose centre lies within 0.87 cell + eps of the surface (eps = `band` cells) are kept and
   split in eight, level by level.
3. The field at the band's corners: "udf" is the unsigned distance minus eps (a closed input gives
   an outer and an inner shell), "sdf" the distance signed by the nearest face's normal.
4. Dual contouring: one vertex per cell with a sign change, at the mean of its edge crossings or,
   with `qef`, at the point best fitting the input's planes through them (regularised 1e-2 toward
   that mean, kept only inside the cell); each crossing grid edge makes a quad of its four cells,
   split along the shorter diagonal and wound outward.
5. `project_back` moves vertices near the input (within 4 cells) that fraction toward their
   closest input point; vertex colours are interpolated there.
6. Clean-up: components under `drop_small_components` of the largest's faces, inside-out ones
   (`drop_inverted_components`, the largest kept) and ones inside the largest
   (`drop_enclosed_components`: bounding box inside it, or centre inside by ray parity) dropped;
   `fix_poles` merges neighbouring interior valence-3 vertices; `smooth_iters` Taubin passes
   (lambda 0.5, mu -0.53); unused vertices dropped.

Not done here: the "solid" sign mode (a graph cut over a Delaunay tetrahedralisation of the shell)
and Manifold Dual Contouring (`manifold`), both refused with an error.
"""
from __future__ import annotations


import numpy as np
import torch

from comfy_core.mesh.topology import connected_labels, unique_edges

CORNERS = ((0, 0, 0), (1, 0, 0), (0, 1, 0), (1, 1, 0), (0, 0, 1), (1, 0, 1), (0, 1, 1), (1, 1, 1))
CUBE_EDGES = ((0, 1), (2, 3), (4, 5), (6, 7), (0, 2), (1, 3), (4, 6), (5, 7), (0, 4), (1, 5), (2, 6), (3, 7))
# the four cells around a grid edge along x, y, z (from its lower corner), in quad order
AROUND = (((0, 0, 0), (0, -1, 0), (0, -1, -1), (0, 0, -1)),
          ((0, 0, 0), (0, 0, -1), (-1, 0, -1), (-1, 0, 0)),
          ((0, 0, 0), (-1, 0, 0), (-1, -1, 0), (0, -1, 0)))
OWNED = (0, 4, 8)  # the x, y and z edge leaving a cell's lower corner


def closest_on_triangles(points: torch.Tensor, tris: torch.Tensor) -> torch.Tensor:
    """The closest point of each triangle `tris` [N, 3, 3] to `points` [N, 3] (Ericson's regions)."""
    a, b, c = tris[:, 0], tris[:, 1], tris[:, 2]
    ab, ac = b - a, c - a
    ap, bp, cp = points - a, points - b, points - c
    d1, d2 = (ab * ap).sum(-1), (ac * ap).sum(-1)
    d3, d4 = (ab * bp).sum(-1), (ac * bp).sum(-1)
    d5, d6 = (ab * cp).sum(-1), (ac * cp).sum(-1)
    vc, vb, va = d1 * d4 - d3 * d2, d5 * d2 - d1 * d6, d3 * d6 - d5 * d4
    denom = va + vb + vc
    denom = torch.where(denom.abs() < 1e-30, torch.full_like(denom, 1e-30), denom)
    out = a + (vb / denom)[:, None] * ab + (vc / denom)[:, None] * ac
    on_bc = (va <= 0) & (d4 - d3 >= 0) & (d5 - d6 >= 0)
    t_bc = (d4 - d3) / ((d4 - d3) + (d5 - d6) + 1e-30)
    out = torch.where(on_bc[:, None], b + t_bc[:, None] * (c - b), out)
    on_ac = (vb <= 0) & (d2 >= 0) & (d6 <= 0)
    out = torch.where(on_ac[:, None], a + (d2 / (d2 - d6 + 1e-30))[:, None] * ac, out)
    on_ab = (vc <= 0) & (d1 >= 0) & (d3 <= 0)
    out = torch.where(on_ab[:, None], a + (d1 / (d1 - d3 + 1e-30))[:, None] * ab, out)
    out = torch.where(((d6 >= 0) & (d5 <= d6))[:, None], c, out)
    out = torch.where(((d3 >= 0) & (d4 <= d3))[:, None], b, out)
    out = torch.where(((d1 <= 0) & (d2 <= 0))[:, None], a, out)
    return out


def split_long_triangles(tris: torch.Tensor, longest: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Triangles bisected on their longest edge until none exceeds `longest`; (pieces, source index)."""
    source = torch.arange(tris.shape[0])
    while True:
        lengths = (tris.roll(-1, 1) - tris).norm(dim=-1)
        split = lengths.max(1).values > longest
        if not bool(split.any()):
            return tris, source
        k = lengths[split].argmax(1)
        order = (torch.arange(3)[None] + k[:, None]) % 3
        t = torch.gather(tris[split], 1, order[..., None].expand(-1, -1, 3))
        mid = 0.5 * (t[:, 0] + t[:, 1])
        tris = torch.cat([tris[~split], torch.stack([t[:, 0], mid, t[:, 2]], 1),
                          torch.stack([mid, t[:, 1], t[:, 2]], 1)])
        source = torch.cat([source[~split], source[split], source[split]])


class Distance:
    """Unsigned distance to a triangle set: the `k` triangles with the nearest centroids tested exactly."""

    def __init__(self, tris: torch.Tensor, k: int = 8) -> None:
        from scipy.spatial import cKDTree

        self.tris = tris
        self.k = int(min(k, tris.shape[0]))
        self.tree = cKDTree(tris.mean(1).double().numpy())

    def __call__(self, points: torch.Tensor, chunk: int = 1 << 17):
        """(distance [N], closest point [N, 3], triangle index [N])."""
        n = points.shape[0]
        dist = torch.empty(n, dtype=points.dtype)
        near = torch.empty((n, 3), dtype=points.dtype)
        which = torch.empty(n, dtype=torch.long)
        for s in range(0, n, chunk):
            p = points[s:s + chunk]
            _, cand = self.tree.query(p.double().numpy(), k=self.k)
            cand = torch.from_numpy(np.asarray(cand).reshape(p.shape[0], self.k)).long()
            q = p[:, None, :].expand(-1, self.k, -1).reshape(-1, 3)
            c = closest_on_triangles(q, self.tris[cand.reshape(-1)]).view(-1, self.k, 3)
            d2 = (c - p[:, None, :]).pow(2).sum(-1)
            best = d2.argmin(1)
            rows = torch.arange(p.shape[0])
            dist[s:s + chunk] = d2[rows, best].sqrt()
            near[s:s + chunk] = c[rows, best]
            which[s:s + chunk] = cand[rows, best]
        return dist, near, which


def _key(coords: torch.Tensor, resolution: int) -> torch.Tensor:
    r1 = resolution + 1
    return (coords[..., 0] * r1 + coords[..., 1]) * r1 + coords[..., 2]


def _decode(keys: torch.Tensor, resolution: int) -> torch.Tensor:
    r1 = resolution + 1
    return torch.stack([keys // (r1 * r1), keys // r1 % r1, keys % r1], 1)


def narrow_band(distance: Distance, center, scale: float, resolution: int, eps: float) -> torch.Tensor:
    """Cell coordinates [K, 3] whose centres lie within 0.87 cell + eps of the surface (module docstring)."""
    base = resolution
    while base > 32 and base % 2 == 0:
        base //= 2
    r = torch.arange(base)
    coords = torch.stack(torch.meshgrid(r, r, r, indexing="ij"), -1).reshape(-1, 3)
    children = torch.tensor(CORNERS)
    level = base
    while True:
        cell = scale / level
        centres = ((coords.to(center.dtype) + 0.5) / level - 0.5) * scale + center
        coords = coords[distance(centres)[0] < 0.87 * cell + eps]
        if level >= resolution:
            return coords
        level *= 2
        coords = (coords[:, None, :] * 2 + children[None]).reshape(-1, 3)


def dual_contour(cells: torch.Tensor, corner_keys: torch.Tensor, corner_value: torch.Tensor, resolution: int,
                 scale: float, center: torch.Tensor, normals_at=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(vertices, faces) where the corner values change sign (module docstring, step 4)."""
    corners = torch.tensor(CORNERS)
    edges = torch.tensor(CUBE_EDGES)
    keys = _key(cells[:, None, :] + corners[None], resolution)
    at = torch.searchsorted(corner_keys, keys.reshape(-1)).clamp(max=corner_keys.numel() - 1)
    found = corner_keys[at] == keys.reshape(-1)
    value = torch.where(found, corner_value[at], torch.ones_like(corner_value[at])).view(-1, 8)
    va, vb = value[:, edges[:, 0]], value[:, edges[:, 1]]
    crosses = va * vb < 0
    active = crosses.any(1)
    cells, va, vb, crosses = cells[active], va[active], vb[active], crosses[active]
    n = cells.shape[0]
    if n == 0:
        return torch.zeros((0, 3), dtype=center.dtype), torch.zeros((0, 3), dtype=torch.long)
    t = (va / (va - vb + 1e-20)).clamp(0.0, 1.0)[..., None]
    world = ((cells[:, None, :] + corners[None]).to(center.dtype) / resolution - 0.5) * scale + center  # [n, 8, 3]
    points = torch.lerp(world[:, edges[:, 0]], world[:, edges[:, 1]], t) * crosses[..., None]
    count = crosses.sum(1, keepdim=True).to(points.dtype)
    centroid = points.sum(1) / count
    verts = centroid
    if normals_at is not None:
        flat = crosses.reshape(-1)
        normal = torch.zeros((n * 12, 3), dtype=points.dtype)
        normal[flat] = normals_at(points.reshape(-1, 3)[flat]).to(points.dtype)
        normal = normal.view(n, 12, 3)
        a = torch.einsum("vec,ved->vcd", normal, normal) + 1e-2 * torch.eye(3, dtype=points.dtype)
        b = torch.einsum("ve,vec->vc", (normal * points).sum(-1), normal) + 1e-2 * centroid
        solved = torch.linalg.solve(a, b[..., None])[..., 0]
        inside = (solved >= world[:, 0]).all(-1) & (solved <= world[:, 7]).all(-1)
        verts = torch.where(inside[:, None], solved, centroid)
    cell_keys = _key(cells, resolution)
    order = torch.argsort(cell_keys)
    sorted_keys = cell_keys[order]
    around = torch.tensor(AROUND)
    tris = []
    for axis in range(3):
        slot = OWNED[axis]
        owner = torch.nonzero(crosses[:, slot], as_tuple=True)[0]
        if owner.numel() == 0:
            continue
        outside = va[owner, slot] > 0
        neighbour = _key(cells[owner][:, None, :] + around[axis][None], resolution).reshape(-1)
        pos = torch.searchsorted(sorted_keys, neighbour).clamp(max=n - 1)
        ok = (sorted_keys[pos] == neighbour).view(-1, 4).all(1)
        quad = order[pos].view(-1, 4)[ok]
        outside = outside[ok]
        p = verts[quad]
        turn = (p[:, 1] - p[:, 3]).norm(dim=-1) < (p[:, 0] - p[:, 2]).norm(dim=-1)
        quad = torch.where(turn[:, None], quad.roll(-1, 1), quad)
        d0, d1, d2, d3 = quad.unbind(1)
        first = torch.where(outside[:, None], torch.stack([d0, d2, d1], 1), torch.stack([d0, d1, d2], 1))
        second = torch.where(outside[:, None], torch.stack([d0, d3, d2], 1), torch.stack([d0, d2, d3], 1))
        tris += [first, second]
    faces = torch.cat(tris) if tris else torch.zeros((0, 3), dtype=torch.long)
    return verts, faces


def filter_components(verts: torch.Tensor, faces: torch.Tensor, min_fraction: float, drop_inverted: bool,
                      drop_enclosed: bool) -> torch.Tensor:
    """Faces of the components kept (module docstring, step 6)."""
    label = connected_labels(torch.cat([faces[:, :2], faces[:, 1:]]), verts.shape[0])
    names, inverse = torch.unique(label[faces[:, 0]], return_inverse=True)
    m = names.shape[0]
    counts = torch.bincount(inverse, minlength=m)
    keep = torch.ones(m, dtype=torch.bool)
    if min_fraction > 0:
        keep &= counts >= max(1, int(int(counts.max()) * min_fraction))
    largest = int(counts.argmax())
    tri = verts[faces]
    if drop_inverted and m > 1:
        volume = torch.zeros(m, dtype=verts.dtype).index_add_(
            0, inverse, (tri[:, 0] * torch.linalg.cross(tri[:, 1], tri[:, 2])).sum(-1))
        fine = volume >= 0
        fine[largest] = True
        keep &= fine
    if drop_enclosed and m > 1:
        low = torch.full((m, 3), float("inf"), dtype=verts.dtype).scatter_reduce(
            0, inverse[:, None].expand(-1, 3), tri.min(1).values, "amin")
        high = torch.full((m, 3), float("-inf"), dtype=verts.dtype).scatter_reduce(
            0, inverse[:, None].expand(-1, 3), tri.max(1).values, "amax")
        enclosed = (low >= low[largest]).all(1) & (high <= high[largest]).all(1)
        enclosed[largest] = False
        centre = torch.zeros((m, 3), dtype=verts.dtype).index_add_(0, inverse, tri.mean(1)) / counts[:, None]
        big = tri[inverse == largest]
        for c in torch.nonzero(keep & ~enclosed & (torch.arange(m) != largest), as_tuple=True)[0].tolist():
            o = centre[c]
            y0, z0 = big[:, :, 1] - o[1], big[:, :, 2] - o[2]
            s12 = y0[:, 1] * z0[:, 2] - z0[:, 1] * y0[:, 2]
            s20 = y0[:, 2] * z0[:, 0] - z0[:, 2] * y0[:, 0]
            s01 = y0[:, 0] * z0[:, 1] - z0[:, 0] * y0[:, 1]
            total = s12 + s20 + s01
            within = (((s12 >= 0) & (s20 >= 0) & (s01 >= 0)) | ((s12 <= 0) & (s20 <= 0) & (s01 <= 0))) & \
                (total.abs() > 1e-20)
            safe = torch.where(total.abs() > 1e-20, total, torch.ones_like(total))
            x_hit = (s12 * big[:, 0, 0] + s20 * big[:, 1, 0] + s01 * big[:, 2, 0]) / safe
            if int((within & (x_hit > o[0])).sum()) % 2 == 1:
                enclosed[c] = True
        keep &= ~enclosed
    return faces if bool(keep.all()) else faces[keep[inverse]]


def taubin_smooth(verts: torch.Tensor, faces: torch.Tensor, iters: int, lam: float = 0.5, mu: float = -0.53):
    """`iters` passes of a uniform-weight Laplacian step by `lam` then by `mu` (shrink-free smoothing)."""
    if iters <= 0 or faces.numel() == 0:
        return verts
    edges, _ = unique_edges(faces, verts.shape[0])
    a, b = edges[:, 0], edges[:, 1]
    degree = torch.zeros(verts.shape[0], dtype=verts.dtype).index_add_(0, a, torch.ones_like(a, dtype=verts.dtype))
    degree.index_add_(0, b, torch.ones_like(b, dtype=verts.dtype))
    has = (degree > 0)[:, None]
    out = verts
    for _ in range(iters):
        for w in (lam, mu):
            total = torch.zeros_like(out).index_add_(0, a, out[b]).index_add_(0, b, out[a])
            out = out + w * (total / degree.clamp_min(1.0)[:, None] - out) * has
    return out


def fix_poles(verts: torch.Tensor, faces: torch.Tensor, colors: torch.Tensor | None = None):
    """Pairs of neighbouring interior valence-3 vertices merged at their midpoint (each vertex once,
    pairs taken in edge order); degenerate faces and unused vertices dropped."""
    n = verts.shape[0]
    edges, counts = unique_edges(faces, n)
    a, b = edges[:, 0], edges[:, 1]
    boundary = torch.zeros(n, dtype=torch.bool)
    boundary[edges[counts == 1].reshape(-1)] = True
    valence = torch.bincount(torch.cat([a, b]), minlength=n)
    pole = (valence == 3) & ~boundary
    used = set()
    pairs = []
    for x, y in edges[pole[a] & pole[b]].tolist():
        if x not in used and y not in used:
            pairs.append((x, y))
            used.update((x, y))
    if not pairs:
        return verts, faces, colors
    pair = torch.tensor(pairs)
    keep_i, drop_i = pair.min(1).values, pair.max(1).values
    verts = verts.clone()
    verts[keep_i] = 0.5 * (verts[pair[:, 0]] + verts[pair[:, 1]])
    if colors is not None:
        colors = colors.clone()
        colors[keep_i] = 0.5 * (colors[pair[:, 0]] + colors[pair[:, 1]])
    remap = torch.arange(n)
    remap[drop_i] = keep_i
    f = remap[faces.long()]
    f = f[(f[:, 0] != f[:, 1]) & (f[:, 1] != f[:, 2]) & (f[:, 0] != f[:, 2])]
    used_mask = torch.zeros(n, dtype=torch.bool)
    used_mask[f.reshape(-1)] = True
    compact = used_mask.long().cumsum(0) - 1
    return verts[used_mask], compact[f], (colors[used_mask] if colors is not None else None)


def remesh(vertices: torch.Tensor, faces: torch.Tensor, *, resolution: int = 256, band: float = 1.0,
           project_back: float = 0.0, qef: bool = True, sign_mode: str = "udf", drop_small_components: float = 0.01,
           drop_inverted_components: bool = True, drop_enclosed_components: bool = True, fix_poles_: bool = False,
           smooth_iters: int = 0, manifold: bool = False, colors: torch.Tensor | None = None,
           scale: float | None = None, center: torch.Tensor | None = None):
    """(vertices, faces, colours) of the remeshed surface (module docstring)."""
    if sign_mode not in ("sdf", "udf", "solid"):
        raise ValueError(f"sign_mode must be 'sdf'|'udf'|'solid', got {sign_mode!r}")
    if sign_mode == "solid":
        raise NotImplementedError("RemeshMesh: the 'solid' sign mode (a graph cut over a tetrahedralisation) "
                                  "is not available here; use 'udf' or 'sdf'")
    if manifold and sign_mode == "sdf":
        raise NotImplementedError("RemeshMesh: Manifold Dual Contouring is not available here; turn 'manifold' off")
    v = vertices.double()
    f = faces.long()
    if center is None:
        center = 0.5 * (v.max(0).values + v.min(0).values)
    center = center.double()
    if scale is None:
        scale = float((v.max(0).values - v.min(0).values).max()) * 1.1
    eps = band * scale / resolution
    cell = scale / resolution
    tris, source = split_long_triangles(v[f], 4.0 * cell)
    distance = Distance(tris)
    cells = narrow_band(distance, center, scale, resolution, eps)
    empty = (torch.zeros((0, 3), dtype=vertices.dtype), torch.zeros((0, 3), dtype=faces.dtype),
             None if colors is None else torch.zeros((0, colors.shape[1]), dtype=colors.dtype))
    if cells.shape[0] == 0:
        return empty
    corner_keys = torch.unique(_key(cells[:, None, :] + torch.tensor(CORNERS)[None], resolution))
    corner_world = (_decode(corner_keys, resolution).double() / resolution - 0.5) * scale + center
    dist, near, which = distance(corner_world)
    normals = torch.nn.functional.normalize(torch.linalg.cross(tris[:, 1] - tris[:, 0], tris[:, 2] - tris[:, 0]),
                                            dim=-1, eps=1e-12)
    if sign_mode == "sdf":
        inside = ((corner_world - near) * normals[which]).sum(-1) < 0
        value = torch.where(inside, -dist, dist)
    else:
        value = dist - eps
    normals_at = (lambda p: normals[distance(p)[2]]) if qef else None
    verts, new_faces = dual_contour(cells, corner_keys, value, resolution, scale, center, normals_at)
    out_colors = None
    if (project_back > 0 or colors is not None) and verts.shape[0]:
        d, closest, tri_index = distance(verts)
        if project_back > 0:
            verts = torch.where((d <= 4.0 * cell)[:, None], torch.lerp(verts, closest, float(project_back)), verts)
        if colors is not None:
            corner_ids = f[source[tri_index]]
            p = v[corner_ids]
            e0, e1, e2 = p[:, 1] - p[:, 0], p[:, 2] - p[:, 0], closest - p[:, 0]
            d00, d01, d11 = (e0 * e0).sum(-1), (e0 * e1).sum(-1), (e1 * e1).sum(-1)
            d20, d21 = (e2 * e0).sum(-1), (e2 * e1).sum(-1)
            den = d00 * d11 - d01 * d01 + 1e-20
            bv = ((d11 * d20 - d01 * d21) / den).clamp(0, 1)
            bw = ((d00 * d21 - d01 * d20) / den).clamp(0, 1)
            bu = (1 - bv - bw).clamp(0, 1)
            c = colors.double()[corner_ids]
            out_colors = bu[:, None] * c[:, 0] + bv[:, None] * c[:, 1] + bw[:, None] * c[:, 2]
    if new_faces.numel() and (drop_small_components > 0 or drop_inverted_components or drop_enclosed_components):
        new_faces = filter_components(verts, new_faces, max(drop_small_components, 0.0), drop_inverted_components,
                                      drop_enclosed_components)
    if fix_poles_ and new_faces.numel():
        verts, new_faces, out_colors = fix_poles(verts, new_faces, out_colors)
    if smooth_iters > 0 and new_faces.numel():
        verts = taubin_smooth(verts, new_faces, int(smooth_iters))
    if new_faces.numel() == 0:
        return empty
    used = torch.zeros(verts.shape[0], dtype=torch.bool)
    used[new_faces.reshape(-1)] = True
    remap = used.long().cumsum(0) - 1
    verts, new_faces = verts[used], remap[new_faces]
    if out_colors is not None:
        out_colors = out_colors[used]
    return (verts.to(vertices.dtype), new_faces.to(faces.dtype),
            out_colors.to(colors.dtype) if out_colors is not None and colors is not None else None)


def cluster_decimate(vertices: torch.Tensor, faces: torch.Tensor, target_verts: int,
                     colors: torch.Tensor | None = None):
    """Vertex clustering to about `target_verts` (ComfyUI's `qem_cluster_decimate`): cells sized so
    the bounding box holds about 3 x target cells, each cell's vertices (and colours) averaged,
    degenerate and repeated faces dropped."""
    if vertices.shape[0] == 0 or faces.shape[0] == 0:
        return vertices, faces, colors
    lo = vertices.min(0).values
    extent = vertices.max(0).values - lo
    cells_per_axis = max(target_verts * 3, 1000) ** (1 / 3)
    size = max(float(extent.max()) / max(1.0, cells_per_axis), 1e-20)
    q = ((vertices - lo) / size).floor().long()
    dims = (extent / size).floor().long() + 2
    key = (q[:, 0] * dims[1] + q[:, 1]) * dims[2] + q[:, 2]
    unique, inverse = torch.unique(key, return_inverse=True)
    count = torch.zeros(unique.shape[0], dtype=vertices.dtype).index_add_(0, inverse, torch.ones_like(vertices[:, 0]))
    new_v = torch.zeros((unique.shape[0], 3), dtype=vertices.dtype).index_add_(0, inverse, vertices) / count[:, None]
    new_c = None
    if colors is not None:
        new_c = torch.zeros((unique.shape[0], colors.shape[1]), dtype=colors.dtype).index_add_(0, inverse, colors)
        new_c = new_c / count[:, None].to(colors.dtype)
    f = inverse[faces.long()]
    f = f[(f[:, 0] != f[:, 1]) & (f[:, 1] != f[:, 2]) & (f[:, 0] != f[:, 2])]
    from comfy_core.mesh.topology import drop_duplicate_faces

    return new_v, drop_duplicate_faces(f).to(faces.dtype), new_c
