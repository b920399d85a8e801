"""Per-vertex normals: behaviour of today's ComfyUI's `_smooth_vertex_normals` and
`_compute_vertex_face_normals` (comfy_extras/nodes_mesh_postprocess.py, MeshSmoothNormals);
written here.

* Smooth: every face's unnormalised normal (its length is twice its area) added to its three
  corners, so the average is area-weighted; with `weld`, vertices at the same position (within
  1e-5 of the largest bounding-box side: UV-seam copies) share one normal. Unit length; a vertex
  without area keeps a zero normal.
* Crease split (`crease_angle` < 180 degrees): faces joined across each edge that exactly two
  faces share and whose face normals differ by at most the angle form smoothing groups; every
  (vertex, group) pair becomes an output vertex (first use order, face by face), so edges
  sharper than the angle stay hard. `remap` gives each output vertex's source vertex.
"""
from __future__ import annotations

import math

import torch

from comfy_core.mesh.topology import connected_labels, edge_keys, half_edges


def face_normals(vertices: torch.Tensor, faces: torch.Tensor) -> torch.Tensor:
    """Unnormalised face normals (length = twice the area), [M, 3]."""
    f = faces.long()
    p0 = vertices[f[:, 0]]
    return torch.linalg.cross(vertices[f[:, 1]] - p0, vertices[f[:, 2]] - p0)


def _unit(rows: torch.Tensor) -> torch.Tensor:
    length = rows.norm(dim=-1, keepdim=True)
    return rows / torch.where(length > 1e-12, length, torch.ones_like(length))


def smooth_vertex_normals(vertices: torch.Tensor, faces: torch.Tensor, weld: bool = True) -> torch.Tensor:
    """Area-weighted unit vertex normals [N, 3] (module docstring), in float32."""
    v = vertices.double()
    f = faces.long()
    fn = face_normals(v, f)
    if weld and v.shape[0]:
        lo = v.min(0).values
        tolerance = max(float((v.max(0).values - lo).max()), 1e-9) * 1e-5
        _, group = torch.unique(((v - lo) / tolerance).round().long(), dim=0, return_inverse=True)
        acc = torch.zeros((int(group.max()) + 1, 3), dtype=v.dtype)
        for k in range(3):
            acc.index_add_(0, group[f[:, k]], fn)
        normals = acc[group]
    else:
        normals = torch.zeros_like(v)
        for k in range(3):
            normals.index_add_(0, f[:, k], fn)
    return _unit(normals).float()


def crease_split_normals(vertices: torch.Tensor, faces: torch.Tensor, crease_angle: float
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(vertices, faces, unit normals, remap) with vertices split along creases (module docstring)."""
    v = vertices.double()
    f = faces.long()
    m = f.shape[0]
    fn = face_normals(v, f)
    unit = _unit(fn)
    cos_limit = math.cos(math.radians(crease_angle))
    # pair up the two faces of every edge that exactly two faces share
    keys = edge_keys(half_edges(f), v.shape[0])
    owner = torch.arange(m).repeat(3)
    order = torch.argsort(keys, stable=True)
    ks, fo = keys[order], owner[order]
    _, counts = torch.unique_consecutive(ks, return_counts=True)
    starts = torch.cumsum(counts, 0) - counts
    pairs = starts[counts == 2]
    fa, fb = fo[pairs], fo[pairs + 1]
    smooth = (unit[fa] * unit[fb]).sum(-1) >= cos_limit
    group = connected_labels(torch.stack([fa[smooth], fb[smooth]], 1), m)
    # one output vertex per (vertex, group), numbered in order of first use
    corner_vertex = f.reshape(-1)
    corner_key = corner_vertex * m + group.repeat_interleave(3)
    unique, inverse = torch.unique(corner_key, return_inverse=True)
    first = torch.full((unique.shape[0],), corner_key.shape[0], dtype=torch.long)
    first.scatter_reduce_(0, inverse, torch.arange(corner_key.shape[0]), "amin")
    rank = torch.empty_like(first)
    rank[torch.argsort(first)] = torch.arange(first.shape[0])
    new_faces = rank[inverse].view(m, 3)
    remap = corner_vertex[first[torch.argsort(first)]]
    normals = torch.zeros((remap.shape[0], 3), dtype=v.dtype)
    for k in range(3):
        normals.index_add_(0, new_faces[:, k], fn)
    return vertices[remap], new_faces, _unit(normals).float(), remap
