"""Hole filling: behaviour of today's ComfyUI's FillHoles (`fill_holes_v2_fn`,
`_fill_holes_v2_gpu` in comfy_extras/nodes_mesh_postprocess.py); written here.

1. Pre-weld (`weld_epsilon_rel` > 0): boundaries need shared edges, so vertices are welded at
   `weld_epsilon_rel` of the bounding-box diagonal, the tolerance doubling (up to 1e-2) while the
   mesh still has at least as many vertices as faces.
2. Boundary half-edges are those of edges used by one face, kept in their faces' direction; their
   connected components are the holes, each named by its smallest vertex. A hole is filled when it
   is a closed loop (as many vertices as edges; with `fill_chains` an open chain too), has 3 to
   `max_verts` vertices and a perimeter below `max_perimeter`.
3. A hole of up to 8 vertices is fanned from its smallest vertex: a face (b, a, apex) for each of
   its edges a -> b not touching the apex. A larger one gets a new vertex at the mean of its
   vertices (colour: their mean colour) and a face (b, a, centre) per edge; a filled chain is then
   closed by a face between its two ends and the centre. The new faces run against the boundary's
   direction, so they wind like the faces around them; existing vertices and faces are kept and
   the new ones appended (centre-fan faces first).
"""
from __future__ import annotations

import logging

import torch

from comfy_core.mesh.topology import connected_labels, edge_keys, half_edges, weld_vertices

CENTROID_FAN_ABOVE = 8
WELD_CAP = 1e-2
WELDED_RATIO = 1.0


def fill_holes(vertices: torch.Tensor, faces: torch.Tensor, max_perimeter: float = 0.03,
               colors: torch.Tensor | None = None, weld_epsilon_rel: float = 1e-5, fill_chains: bool = False,
               max_verts: int = 16) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(vertices, faces, colours) with the small holes filled (module docstring)."""
    if faces.numel() == 0:
        return vertices, faces, colors
    if weld_epsilon_rel > 0:
        eps = float(weld_epsilon_rel)
        while True:
            vertices, faces, colors, _ = weld_vertices(vertices, faces, None, eps, colors)
            ratio = vertices.shape[0] / max(faces.shape[0], 1)
            if ratio < WELDED_RATIO or eps >= WELD_CAP:
                break
            eps = min(eps * 2.0, WELD_CAP)
        if ratio >= WELDED_RATIO:
            logging.warning("[FillHoles] the mesh stays unwelded at weld epsilon_rel=%s (V/F=%.2f); "
                            "run WeldVertices with a larger epsilon first.", WELD_CAP, ratio)
    v, f, c = _fill(vertices, faces, float(max_perimeter), colors, bool(fill_chains), int(max_verts))
    return v, f, c


def _fill(verts: torch.Tensor, faces: torch.Tensor, max_perimeter: float, colors: torch.Tensor | None,
          fill_chains: bool, max_verts: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    n = verts.shape[0]
    directed = half_edges(faces.long())
    keys = edge_keys(directed, n)
    unique, counts = torch.unique(keys, return_counts=True)
    boundary = torch.isin(keys, unique[counts == 1])
    if not bool(boundary.any()):
        return verts, faces, colors
    src, tgt = directed[boundary, 0], directed[boundary, 1]
    labels = connected_labels(torch.stack([src, tgt], 1), n)
    names, hole = torch.unique(labels[src], return_inverse=True)
    holes = names.shape[0]
    edge_count = torch.bincount(hole, minlength=holes)
    lengths = (verts[src] - verts[tgt]).double().norm(dim=-1)
    perimeter = torch.zeros(holes, dtype=torch.float64).index_add_(0, hole, lengths)
    pairs = torch.unique(torch.cat([hole * n + src, hole * n + tgt]))
    pair_vertex, pair_hole = pairs % n, pairs // n
    vertex_count = torch.bincount(pair_hole, minlength=holes)
    centre = torch.zeros((holes, 3), dtype=verts.dtype).index_add_(0, pair_hole, verts[pair_vertex])
    centre = centre / vertex_count.clamp_min(1).to(verts.dtype)[:, None]
    loop = (vertex_count == edge_count) & (vertex_count > 0)
    fits = (vertex_count >= 3) & (vertex_count <= max_verts) & (perimeter < max_perimeter)
    keep = fits if fill_chains else loop & fits
    if not bool(keep.any()):
        return verts, faces, colors
    by_centre = keep & (vertex_count > CENTROID_FAN_ABOVE)
    centre_index = n + by_centre.long().cumsum(0) - 1
    kept = keep[hole]
    e_hole, e_src, e_tgt = hole[kept], src[kept], tgt[kept]
    pieces = []
    fan = by_centre[e_hole]
    if bool(fan.any()):
        pieces.append(torch.stack([e_tgt[fan], e_src[fan], centre_index[e_hole[fan]]], 1))
    small = ~fan
    if bool(small.any()):
        apex = names[e_hole[small]]
        a, b = e_src[small], e_tgt[small]
        away = (a != apex) & (b != apex)
        pieces.append(torch.stack([b[away], a[away], apex[away]], 1))
    if fill_chains:
        degree = torch.zeros(n, dtype=torch.long)
        degree.index_add_(0, src, torch.ones_like(src)).index_add_(0, tgt, torch.ones_like(tgt))
        end = (degree[pair_vertex] == 1) & by_centre[pair_hole]
        if bool(end.any()):
            ends, end_hole = pair_vertex[end], pair_hole[end]
            order = torch.argsort(end_hole, stable=True)
            ends, end_hole = ends[order], end_hole[order]
            two = torch.bincount(end_hole, minlength=holes)[end_hole] == 2
            if bool(two.any()):
                ends, end_hole = ends[two].view(-1, 2), end_hole[two].view(-1, 2)[:, 0]
                pieces.append(torch.stack([ends[:, 0], ends[:, 1], centre_index[end_hole]], 1))
    new_faces = torch.cat(pieces).to(faces.dtype) if pieces else faces.new_zeros((0, 3))
    out_v = torch.cat([verts, centre[by_centre]])
    out_c = colors
    if colors is not None:
        summed = torch.zeros((holes, colors.shape[1]), dtype=colors.dtype).index_add_(0, pair_hole, colors[pair_vertex])
        mean = summed / vertex_count.clamp_min(1).to(colors.dtype)[:, None]
        out_c = torch.cat([colors, mean[by_centre]])
    return out_v, torch.cat([faces, new_faces]), out_c
