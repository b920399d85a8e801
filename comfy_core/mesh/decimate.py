"""Quadric-error-metric simplification: behaviour of today's ComfyUI's DecimateMesh
(`qem_simplify` and `QEMConfig` in comfy_extras/mesh3d/postprocess/qem_decimate.py); written here
(Garland & Heckbert's quadrics, collapsed in parallel rounds).

* Preclean: weld at 1e-5 of the bounding-box diagonal, drop degenerate and duplicate faces and
  unused vertices. A mesh already at or below the target (or with fewer than 4 vertices) is
  returned cleaned.
* Quadrics: each vertex sums the planes of its faces, plus line quadrics (weight 1000) pinning
  boundary vertices to their boundary edges; in "qem" mode optionally line quadrics on every edge
  (`line_quadric_weight`, weighted by face area) and on dihedral feature edges sharper than
  `feature_edge_min_dihedral_deg` (`feature_edge_quadric_weight`).
* Placement: "midpoint" (the default) puts the merged vertex at the edge midpoint, or at the
  boundary end when exactly one end is on the boundary; "qem" solves for the quadric's optimum
  (Tikhonov term 1e-3 x scale²), projected onto the edge (`clamp_v_to_edge`) or replaced by the
  midpoint when it wanders more than twice the edge length away.
* Cost: |v^T Q v| + 1e-2 x length²; a collapse that flips the normal of a face around it, or
  (until that alone blocks the target) breaks the link condition, is refused; slivers made cost
  extra (1e-3 x (1 - shape quality) x length²).
* Rounds: each round collapses an independent set of edges (each edge whose cost is lowest at both
  its ends). "midpoint" takes the edges whose cost is under a threshold (1e-8 x scale², x10 when a
  round removes under 1 %), "qem" the cheapest up to a share of what is left; about two faces go
  per collapse, at most half the faces still to remove per round.
* Postclean: duplicate faces dropped, slivers (angle < 0.5 degrees or aspect > 100) collapsed,
  components under 8 faces and unused vertices dropped.

Not done: ComfyUI's final split of sheets fused at non-manifold edges (`repair_nonmanifold`),
and its CUDA kernels (the checks here are exact on any device).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from comfy_core.mesh.topology import (collapse_slivers, drop_degenerate_faces, drop_duplicate_faces,
                                      drop_small_components, drop_unused_vertices, edge_keys, half_edges,
                                      unique_edges, weld_vertices)


@dataclass
class QEMConfig:
    placement_mode: str = "midpoint"  # or "qem"
    stabilizer_scale: float = 1e-3
    wander_threshold: float = 2.0
    clamp_v_to_edge: bool = True
    max_collapses_fraction: float = 0.25
    max_collapses_floor: int = 10_000
    max_collapses_ceiling: int = 1_000_000
    max_collapses_relative_cap: float = 0.10
    max_iterations: int = 5_000
    boundary_weight: float = 1000.0
    line_quadric_weight: float = 0.0
    line_quadric_skip_opposite_normals_cos: float = 0.0
    feature_edge_quadric_weight: float = 0.0
    feature_edge_min_dihedral_deg: float = 30.0
    flip_cos_threshold: float = 0.0
    skinny_weight: float = 1e-3
    enforce_link_condition: bool = True
    lambda_edge_length: float = 1e-2
    threshold_start: float = 1e-8
    postclean: bool = True
    postclean_min_angle_deg: float = 0.5
    postclean_max_aspect_ratio: float = 100.0
    postclean_min_component_faces: int = 8
    preclean_weld_epsilon_rel: float = 1e-5

    @property
    def threshold_driver(self) -> bool:
        return self.placement_mode == "midpoint"


def clean_mesh(verts: torch.Tensor, faces: torch.Tensor, colors: torch.Tensor | None = None, *,
               weld_epsilon_rel: float = 0.0, drop_duplicates: bool = True, min_component_faces: int = 0,
               min_angle_deg: float = 0.0, max_aspect_ratio: float = 0.0):
    f = faces.long()
    if weld_epsilon_rel > 0 and verts.shape[0]:
        eps = float(torch.linalg.vector_norm(verts.max(0).values - verts.min(0).values)) * weld_epsilon_rel
        if eps > 0:
            verts, f, colors, _ = weld_vertices(verts, f, eps, colors=colors)
    f = drop_degenerate_faces(verts, f)
    f = collapse_slivers(verts, f, min_angle_deg, max_aspect_ratio)
    if drop_duplicates:
        f = drop_duplicate_faces(f)
    f = drop_small_components(verts, f, min_component_faces)
    return drop_unused_vertices(verts, f, colors)


def _line_planes(pa: torch.Tensor, pb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Two planes through the line pa-pb, orthogonal to each other: their squared distances sum
    to the squared distance from the line."""
    e = pb - pa
    e = e / e.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    helper = torch.zeros_like(e)
    helper.scatter_(-1, e.abs().argmin(dim=-1, keepdim=True), 1.0)
    u = helper - (helper * e).sum(-1, keepdim=True) * e
    u = u / u.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    w = torch.linalg.cross(e, u)
    mid = 0.5 * (pa + pb)
    return (torch.cat([u, -(u * mid).sum(-1, keepdim=True)], -1),
            torch.cat([w, -(w * mid).sum(-1, keepdim=True)], -1))


def _add_outer(q: torch.Tensor, index: torch.Tensor, planes: list[torch.Tensor], weight: torch.Tensor | float) -> None:
    k = sum(torch.einsum("ei,ej->eij", p, p) for p in planes)
    if isinstance(weight, torch.Tensor):
        k = k * weight[:, None, None]
    else:
        k = k * weight
    q.index_add_(0, index, k)


def _quadrics(verts: torch.Tensor, faces: torch.Tensor, cfg: QEMConfig, b_edges: torch.Tensor) -> torch.Tensor:
    n = verts.shape[0]
    q = torch.zeros((n, 4, 4), dtype=verts.dtype)
    if faces.numel():
        p0, p1, p2 = verts[faces[:, 0]], verts[faces[:, 1]], verts[faces[:, 2]]
        raw = torch.linalg.cross(p1 - p0, p2 - p0)
        area2 = raw.norm(dim=-1)
        normal = torch.where((area2 > 1e-12)[:, None], raw / area2.clamp_min(1e-12)[:, None], torch.zeros_like(raw))
        plane = torch.cat([normal, -(normal * p0).sum(-1, keepdim=True)], -1)
        for k in range(3):
            _add_outer(q, faces[:, k], [plane], 1.0)
        if cfg.line_quadric_weight > 0:
            vn = torch.zeros_like(verts)
            for k in range(3):
                vn.index_add_(0, faces[:, k], normal * area2[:, None])
            vn = torch.nn.functional.normalize(vn, dim=-1, eps=1e-12)
            he = half_edges(faces)
            weight = area2.repeat(3) * cfg.line_quadric_weight
            weight = torch.where((vn[he[:, 0]] * vn[he[:, 1]]).sum(-1) < cfg.line_quadric_skip_opposite_normals_cos,
                                 torch.zeros_like(weight), weight)
            planes = list(_line_planes(verts[he[:, 0]], verts[he[:, 1]]))
            _add_outer(q, he[:, 0], planes, weight)
            _add_outer(q, he[:, 1], planes, weight)
        if cfg.feature_edge_quadric_weight > 0:
            keys = edge_keys(half_edges(faces), n)
            owner = torch.arange(faces.shape[0]).repeat(3)
            order = torch.argsort(keys, stable=True)
            ks, fo = keys[order], owner[order]
            _, counts = torch.unique_consecutive(ks, return_counts=True)
            starts = (torch.cumsum(counts, 0) - counts)[counts == 2]
            fa, fb = fo[starts], fo[starts + 1]
            cos = (normal[fa] * normal[fb]).sum(-1)
            sharp = cos < math.cos(math.radians(cfg.feature_edge_min_dihedral_deg))
            if bool(sharp.any()):
                ea, eb = ks[starts][sharp] // n, ks[starts][sharp] % n
                weight = (0.5 * (area2[fa[sharp]] + area2[fb[sharp]]) * (1.0 - cos[sharp]).clamp_min(0.0)
                          * cfg.feature_edge_quadric_weight)
                planes = list(_line_planes(verts[ea], verts[eb]))
                _add_outer(q, ea, planes, weight)
                _add_outer(q, eb, planes, weight)
    if b_edges.shape[0]:
        planes = list(_line_planes(verts[b_edges[:, 0]], verts[b_edges[:, 1]]))
        _add_outer(q, b_edges[:, 0], planes, cfg.boundary_weight)
        _add_outer(q, b_edges[:, 1], planes, cfg.boundary_weight)
    return q


def _edge_costs(verts, q, edges, cfg, scale_sq, on_boundary):
    pa, pb = verts[edges[:, 0]], verts[edges[:, 1]]
    vec = pb - pa
    length = vec.norm(dim=-1)
    if on_boundary is not None:
        ba, bb = on_boundary[edges[:, 0]], on_boundary[edges[:, 1]]
        wa = torch.where(ba & ~bb, 1.0, torch.where(~ba & bb, 0.0, 0.5)).to(verts.dtype)
        midpoint = pa * wa[:, None] + pb * (1.0 - wa)[:, None]
    else:
        midpoint = 0.5 * (pa + pb)
    qe = q[edges[:, 0]] + q[edges[:, 1]]
    if cfg.placement_mode == "midpoint":
        opt = midpoint
    else:
        a = qe[:, :3, :3] + torch.eye(3, dtype=verts.dtype) * (scale_sq * cfg.stabilizer_scale)
        sol = torch.linalg.solve(a, -qe[:, :3, 3:]).squeeze(-1)
        good = (torch.linalg.det(a).abs() > 1e-12)[:, None] & torch.isfinite(sol).all(-1, keepdim=True)
        opt = torch.where(good, sol, midpoint)
        if cfg.clamp_v_to_edge:
            t = (((opt - pa) * vec).sum(-1) / ((vec * vec).sum(-1) + 1e-20)).clamp(0.0, 1.0)
            opt = pa + vec * t[:, None]
        else:
            wander = ((opt - pa).norm(dim=-1) > cfg.wander_threshold * length) | \
                     ((opt - pb).norm(dim=-1) > cfg.wander_threshold * length)
            opt = torch.where(wander[:, None], midpoint, opt)
    v4 = torch.cat([opt, torch.ones_like(opt[:, :1])], -1)
    err = torch.einsum("ei,eij,ej->e", v4, qe, v4).abs()
    max_err = 1.0 if math.sqrt(scale_sq) < 5e-7 else 4.0 * scale_sq
    valid = (length * length > scale_sq * 1e-10) & (err < max_err) & torch.isfinite(err) & torch.isfinite(opt).all(-1)
    return opt, err + cfg.lambda_edge_length * length * length, valid


def _incident(faces: torch.Tensor, n: int) -> torch.Tensor:
    """[N, D] faces around each vertex (all of them), -1 padded."""
    v = faces.reshape(-1)
    f = torch.arange(faces.shape[0]).repeat_interleave(3)
    order = torch.argsort(v, stable=True)
    v, f = v[order], f[order]
    counts = torch.bincount(v, minlength=n)
    width = max(int(counts.max()) if counts.numel() else 1, 1)
    slot = torch.arange(v.shape[0]) - (torch.cumsum(counts, 0) - counts)[v]
    table = torch.full((n, width), -1, dtype=torch.long)
    table[v, slot] = f
    return table


def _gate(verts, faces, edges, opt, err, cfg, link: bool, chunk: int = 20_000):
    """Costs with flips (and link-condition breaks, when `link`) set to +inf, plus the sliver term."""
    table = _incident(faces, verts.shape[0])
    out = err.clone()
    four_root3 = 4.0 * math.sqrt(3.0)
    for s in range(0, edges.shape[0], chunk):
        a, b = edges[s:s + chunk, 0], edges[s:s + chunk, 1]
        ec = a.shape[0]
        around = torch.cat([table[a], table[b]], 1)  # [E, 2D]
        real = around >= 0
        fv = faces[around.clamp_min(0)]  # [E, 2D, 3]
        is_a, is_b = fv == a[:, None, None], fv == b[:, None, None]
        moved = is_a | is_b
        has_a, has_b = is_a.any(-1), is_b.any(-1)
        affected = (has_a ^ has_b) & real
        old = verts[fv]  # [E, 2D, 3, 3]
        new = torch.where(moved[..., None], opt[s:s + chunk, None, None, :], old)

        def geometry(p):
            e01, e02, e12 = p[..., 1, :] - p[..., 0, :], p[..., 2, :] - p[..., 0, :], p[..., 2, :] - p[..., 1, :]
            nrm = torch.linalg.cross(e01, e02)
            return nrm, nrm.norm(dim=-1), (e01 * e01).sum(-1) + (e02 * e02).sum(-1) + (e12 * e12).sum(-1)

        n_old, l_old, s_old = geometry(old)
        n_new, l_new, s_new = geometry(new)
        usable = (l_old > 1e-6 * s_old) & (l_new > 1e-6 * s_new)
        flips = (((n_old * n_new).sum(-1) < cfg.flip_cos_threshold * l_old * l_new) & affected & usable).any(-1)
        shape = (four_root3 * 0.5 * l_new / s_new.clamp_min(1e-20)).clamp(0.0, 1.0)
        skinny = torch.where(affected, 1.0 - shape, torch.zeros_like(shape)).sum(-1) / \
            affected.sum(-1).clamp_min(1).to(shape.dtype)
        cost = out[s:s + chunk] + cfg.skinny_weight * skinny * (verts[b] - verts[a]).pow(2).sum(-1)
        cost = cost.masked_fill(flips, float("inf"))
        if link:
            d = table.shape[1]
            fa_v, fb_v = fv[:, :d], fv[:, d:]
            ra, rb = real[:, :d], real[:, d:]
            na = torch.where(ra[..., None] & ~is_a[:, :d] & ~is_b[:, :d], fa_v, -1).reshape(ec, -1)
            nb = torch.where(rb[..., None] & ~is_a[:, d:] & ~is_b[:, d:], fb_v, -1).reshape(ec, -1)
            shared = ((na[:, :, None] == nb[:, None, :]) & (na[:, :, None] >= 0)).any(-1)
            common = torch.where(shared, na, -1).sort(dim=1).values
            distinct = ((common[:, 1:] != common[:, :-1]) & (common[:, 1:] >= 0)).sum(1) + (common[:, :1] >= 0).sum(1)
            on_edge = (has_b[:, :d] & ra).sum(1)
            cost = cost.masked_fill(distinct > on_edge, float("inf"))
        out[s:s + chunk] = cost
    return out


def _independent_set(edges: torch.Tensor, err: torch.Tensor, alive: torch.Tensor, most: int) -> torch.Tensor:
    """Edges whose (cost, index) key is the lowest at both ends; the `most` cheapest of them."""
    if edges.shape[0] == 0:
        return torch.zeros(0, dtype=torch.long)
    bits = err.float().clamp(min=0).contiguous().view(torch.int32).long() & 0xFFFFFFFF
    key = (bits << 32) | torch.arange(edges.shape[0])
    best = torch.full((alive.shape[0],), torch.iinfo(torch.int64).max, dtype=torch.long)
    best.scatter_reduce_(0, edges[:, 0], key, "amin")
    best.scatter_reduce_(0, edges[:, 1], key, "amin")
    win = (key == best[edges[:, 0]]) & (key == best[edges[:, 1]]) & alive[edges[:, 0]] & alive[edges[:, 1]]
    chosen = torch.nonzero(win, as_tuple=True)[0]
    if chosen.numel() > most:
        chosen = chosen[torch.topk(err[chosen], most, largest=False).indices]
    return chosen


def _folded(faces: torch.Tensor) -> torch.Tensor:
    """Faces sharing their vertex set with another face: every face of a mixed-winding group, and
    all but the first of same-wound repeats."""
    ordered, perm = torch.sort(faces, dim=1)
    groups, inverse = torch.unique(ordered, dim=0, return_inverse=True)
    odd = ((perm[:, 0] > perm[:, 1]).long() + (perm[:, 0] > perm[:, 2]).long() + (perm[:, 1] > perm[:, 2]).long()) % 2
    n_odd = torch.zeros(groups.shape[0], dtype=torch.long).scatter_add_(0, inverse, odd)
    mixed = (n_odd > 0) & (n_odd < torch.bincount(inverse, minlength=groups.shape[0]))
    index = torch.arange(faces.shape[0])
    first = torch.full((groups.shape[0],), faces.shape[0], dtype=torch.long).scatter_reduce(0, inverse, index, "amin")
    return mixed[inverse] | (first[inverse] != index)


def qem_simplify(vertices: torch.Tensor, faces: torch.Tensor, target_faces: int,
                 colors: torch.Tensor | None = None, config: QEMConfig | None = None):
    """(vertices, faces, colours) simplified to at most about `target_faces` faces (module docstring)."""
    cfg = config or QEMConfig()
    v_dtype, f_dtype = vertices.dtype, faces.dtype
    c_dtype = colors.dtype if colors is not None else None
    verts, f, cols = clean_mesh(vertices.detach().cpu().double().clone(), faces.detach().cpu().long(),
                                colors.detach().cpu().double().clone() if colors is not None else None,
                                weld_epsilon_rel=cfg.preclean_weld_epsilon_rel)

    def done(v, fc, c):
        return v.to(v_dtype), fc.to(f_dtype), (c.to(c_dtype) if c is not None else None)

    n = verts.shape[0]
    if f.shape[0] <= target_faces or n < 4:
        return done(verts, f, cols)
    alive = torch.ones(n, dtype=torch.bool)
    scale_sq = float(torch.linalg.vector_norm(verts.max(0).values - verts.min(0).values)) ** 2
    thresh = cfg.threshold_start * scale_sq if cfg.threshold_driver else 0.0
    link = cfg.enforce_link_condition
    q = None
    iteration = 0
    while f.shape[0] > target_faces and f.shape[0]:
        edges, counts = unique_edges(f, n)
        b_edges = edges[counts == 1]
        if q is None or cfg.threshold_driver:
            q = _quadrics(verts, f, cfg, b_edges)
        on_boundary = None
        if cfg.placement_mode != "qem":
            on_boundary = torch.zeros(n, dtype=torch.bool)
            on_boundary[b_edges.reshape(-1)] = True
        opt, err, valid = _edge_costs(verts, q, edges, cfg, scale_sq, on_boundary)
        edges, opt, err = edges[valid], opt[valid], err[valid]
        start = f.shape[0]
        to_remove = start - target_faces
        cap = max(1, to_remove // 2)
        if cfg.threshold_driver:
            band = err <= thresh
            raised = 0
            while not bool(band.any()) and raised < 50:
                thresh *= 10.0
                band = err <= thresh
                raised += 1
            full_band = bool(band.all())
            edges, opt, err = edges[band], opt[band], err[band]
            if edges.shape[0]:
                err = _gate(verts, f, edges, opt, err, cfg, link)
                keep = err <= thresh
                edges, opt, err = edges[keep], opt[keep], err[keep]
            chosen = _independent_set(edges, err, alive, cap)
            if link and full_band and 2 * chosen.numel() < min(0.01 * start, 2 * cap):
                link = False  # only the link condition keeps the target out of reach
            if chosen.numel() == 0:
                thresh *= 10.0
                iteration += 1
                if iteration >= cfg.max_iterations:
                    break
                continue
        else:
            most = min(cfg.max_collapses_ceiling,
                       max(cfg.max_collapses_floor, int(to_remove * cfg.max_collapses_fraction)))
            most = min(most, max(1, int(start * cfg.max_collapses_relative_cap)), cap)
            if edges.shape[0]:
                err = _gate(verts, f, edges, opt, err, cfg, link)
                keep = torch.isfinite(err)
                edges, opt, err = edges[keep], opt[keep], err[keep]
            chosen = _independent_set(edges, err, alive, most)
            if chosen.numel() == 0:
                break
        va, vb, pos = edges[chosen, 0], edges[chosen, 1], opt[chosen]
        if cols is not None:
            vec = verts[vb] - verts[va]
            t = (((pos - verts[va]) * vec).sum(-1) / ((vec * vec).sum(-1) + 1e-20)).clamp(0.0, 1.0)
            cols[va] = torch.lerp(cols[va], cols[vb], t[:, None])
        verts[va] = pos
        alive[vb] = False
        if not cfg.threshold_driver:
            q[va] += q[vb]
        merge = torch.arange(n)
        merge[vb] = va
        f = merge[f]
        f = f[(f[:, 0] != f[:, 1]) & (f[:, 1] != f[:, 2]) & (f[:, 0] != f[:, 2])]
        if cfg.enforce_link_condition and not link and f.shape[0]:
            f = f[~_folded(f)]
        if cfg.threshold_driver and start - f.shape[0] < 0.01 * start:
            thresh *= 10.0
        iteration += 1
        if iteration >= cfg.max_iterations:
            break
    remap = alive.long().cumsum(0) - 1
    out_v, out_c = verts[alive], (cols[alive] if cols is not None else None)
    out_f = drop_duplicate_faces(remap[f])
    if cfg.postclean and out_f.numel():
        out_v, out_f, out_c = clean_mesh(out_v, out_f, out_c, drop_duplicates=False,
                                         min_component_faces=cfg.postclean_min_component_faces,
                                         min_angle_deg=cfg.postclean_min_angle_deg,
                                         max_aspect_ratio=cfg.postclean_max_aspect_ratio)
    return done(out_v, out_f, out_c)
