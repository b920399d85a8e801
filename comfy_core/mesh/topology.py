"""Mesh topology and cleaning on one batch item: `vertices` [N, 3], `faces` [M, 3] (int64).

Behaviour of today's ComfyUI's helpers in comfy_extras/mesh3d/postprocess/qem_decimate.py
(`_connected_labels`, `_weld_vertices`, `_drop_degenerate_faces`, `_drop_duplicate_faces`,
`_drop_unused_verts`, `_drop_small_components`, `_collapse_slivers`) and of `weld_vertices_fn`
in comfy_extras/nodes_mesh_postprocess.py (WeldVertices); written here.
"""
from __future__ import annotations

import torch


def half_edges(faces: torch.Tensor) -> torch.Tensor:
    """[3M, 2] directed edges in ComfyUI's order: every face's (0, 1), then (1, 2), then (2, 0)."""
    return torch.cat([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]], dim=0)


def edge_keys(edges: torch.Tensor, num_vertices: int) -> torch.Tensor:
    """One int64 key per undirected edge: min * N + max."""
    lo = torch.minimum(edges[:, 0], edges[:, 1]).long()
    hi = torch.maximum(edges[:, 0], edges[:, 1]).long()
    return lo * max(num_vertices, 1) + hi


def unique_edges(faces: torch.Tensor, num_vertices: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(edges [E, 2] with lo < hi, how many faces use each [E])."""
    if faces.numel() == 0:
        return faces.new_zeros((0, 2), dtype=torch.long), faces.new_zeros((0,), dtype=torch.long)
    keys, counts = torch.unique(edge_keys(half_edges(faces.long()), num_vertices), return_counts=True)
    n = max(num_vertices, 1)
    return torch.stack([keys // n, keys % n], dim=1), counts


def boundary_edges(faces: torch.Tensor, num_vertices: int) -> torch.Tensor:
    """Undirected edges used by exactly one face [B, 2]."""
    edges, counts = unique_edges(faces, num_vertices)
    return edges[counts == 1]


def connected_labels(edges: torch.Tensor, n: int) -> torch.Tensor:
    """The smallest node index of each node's connected component (nodes 0..n-1, edges [E, 2])."""
    label = torch.arange(n, device=edges.device)
    if edges.numel() == 0:
        return label
    a, b = edges[:, 0].long(), edges[:, 1].long()
    while True:
        low = torch.minimum(label[a], label[b])
        new = label.clone()
        new.scatter_reduce_(0, a, low, "amin")
        new.scatter_reduce_(0, b, low, "amin")
        new = new[new]  # pointer jumping
        if torch.equal(new, label):
            return label
        label = new


def weld_vertices(vertices: torch.Tensor, faces: torch.Tensor, epsilon: float | None = None,
                  epsilon_rel: float = 1e-5, colors: torch.Tensor | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, int]:
    """Merge vertices that fall in the same cell of a grid of side `epsilon` (absolute; `None`:
    `epsilon_rel` times the bounding-box diagonal, at least 1e-12), averaging the positions and
    colours of each cell; returns (vertices, faces, colours, vertices merged). The welded
    vertices come in the order of their cells' keys (x-major), as ComfyUI's do; faces that
    become degenerate stay. An absolute `epsilon` <= 0 welds nothing."""
    if vertices.shape[0] == 0:
        return vertices, faces, colors, 0
    lo = vertices.min(dim=0).values
    hi = vertices.max(dim=0).values
    if epsilon is None:
        eps = max(float(torch.linalg.vector_norm(hi - lo)) * float(epsilon_rel), 1e-12)
    else:
        eps = float(epsilon)
        if eps <= 0:
            return vertices, faces, colors, 0
    cells = ((vertices - lo) / eps).round().long()
    extent = ((hi - lo) / eps).round().long() + 2
    key = (cells[:, 0] * extent[1] + cells[:, 1]) * extent[2] + cells[:, 2]
    unique, inverse = torch.unique(key, return_inverse=True)
    count = unique.shape[0]
    if count == vertices.shape[0]:
        return vertices, faces, colors, 0
    members = torch.zeros(count, dtype=vertices.dtype, device=vertices.device)
    members.scatter_add_(0, inverse, torch.ones_like(vertices[:, 0]))
    welded = torch.zeros((count, 3), dtype=vertices.dtype, device=vertices.device)
    welded.scatter_add_(0, inverse[:, None].expand_as(vertices), vertices)
    welded = welded / members[:, None].clamp_min(1.0)
    new_colors = None
    if colors is not None:
        new_colors = torch.zeros((count, colors.shape[1]), dtype=colors.dtype, device=colors.device)
        new_colors.scatter_add_(0, inverse[:, None].expand_as(colors), colors)
        new_colors = new_colors / members[:, None].clamp_min(1.0).to(colors.dtype)
    new_faces = inverse[faces.long()].to(faces.dtype) if faces.numel() else faces
    return welded, new_faces, new_colors, int(vertices.shape[0] - count)


def drop_degenerate_faces(vertices: torch.Tensor, faces: torch.Tensor, min_area: float = 1e-14) -> torch.Tensor:
    """Faces without a repeated index and with an area of at least `min_area`."""
    if faces.numel() == 0:
        return faces
    f = faces.long()
    distinct = (f[:, 0] != f[:, 1]) & (f[:, 1] != f[:, 2]) & (f[:, 0] != f[:, 2])
    f = faces[distinct]
    return f[face_areas(vertices, f) >= min_area]


def drop_duplicate_faces(faces: torch.Tensor) -> torch.Tensor:
    """The first face of each vertex set (its winding kept)."""
    if faces.shape[0] <= 1:
        return faces
    _, inverse = torch.unique(torch.sort(faces, dim=1).values, dim=0, return_inverse=True)
    first = torch.full((int(inverse.max()) + 1,), faces.shape[0], dtype=torch.long, device=faces.device)
    first.scatter_reduce_(0, inverse, torch.arange(faces.shape[0], device=faces.device), "amin")
    return faces[first.sort().values]


def drop_unused_vertices(vertices: torch.Tensor, faces: torch.Tensor, colors: torch.Tensor | None = None
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Vertices no face uses removed, faces renumbered (order kept)."""
    if vertices.shape[0] == 0 or faces.numel() == 0:
        return vertices, faces, colors
    used = torch.zeros(vertices.shape[0], dtype=torch.bool, device=vertices.device)
    used[faces.long().reshape(-1)] = True
    remap = used.long().cumsum(0) - 1
    return vertices[used], remap[faces.long()].to(faces.dtype), (colors[used] if colors is not None else None)


def drop_small_components(vertices: torch.Tensor, faces: torch.Tensor, min_faces: int) -> torch.Tensor:
    """Faces of the edge-connected components with at least `min_faces` faces; all of them when
    that would keep none or all of the components."""
    if faces.numel() == 0 or min_faces <= 1:
        return faces
    f = faces.long()
    labels = connected_labels(torch.cat([f[:, :2], f[:, 1:]]), vertices.shape[0])
    face_label = labels[f[:, 0]]
    names, counts = torch.unique(face_label, return_counts=True)
    big = names[counts >= min_faces]
    if big.shape[0] in (0, names.shape[0]):
        return faces
    return faces[torch.isin(face_label, big)]


def collapse_slivers(vertices: torch.Tensor, faces: torch.Tensor, min_angle_deg: float = 0.0,
                     max_aspect_ratio: float = 0.0) -> torch.Tensor:
    """Faces after collapsing the shortest edge of every sliver (smallest angle below
    `min_angle_deg`, or longest edge² / (2 * area) above `max_aspect_ratio`); chained collapses
    merge into the lowest vertex; faces left degenerate are dropped."""
    if faces.numel() == 0 or (min_angle_deg <= 0 and max_aspect_ratio <= 0):
        return faces
    f = faces.long()
    p0, p1, p2 = vertices[f[:, 0]], vertices[f[:, 1]], vertices[f[:, 2]]
    l0, l1, l2 = (p1 - p0).norm(dim=-1), (p2 - p1).norm(dim=-1), (p0 - p2).norm(dim=-1)
    area = 0.5 * torch.linalg.cross(p1 - p0, p2 - p0).norm(dim=-1)
    bad = torch.zeros(f.shape[0], dtype=torch.bool, device=f.device)
    if max_aspect_ratio > 0:
        longest = torch.maximum(torch.maximum(l0, l1), l2)
        bad |= longest * longest / (2.0 * area + 1e-12) > max_aspect_ratio
    if min_angle_deg > 0:
        cosines = torch.stack([(l1 * l1 + l2 * l2 - l0 * l0) / (2 * l1 * l2 + 1e-12),
                               (l0 * l0 + l2 * l2 - l1 * l1) / (2 * l0 * l2 + 1e-12),
                               (l0 * l0 + l1 * l1 - l2 * l2) / (2 * l0 * l1 + 1e-12)], dim=-1)
        smallest = torch.rad2deg(torch.acos(cosines.clamp(-1, 1))).min(dim=-1).values
        bad |= smallest < min_angle_deg
    if not bool(bad.any()):
        return faces
    idx = torch.nonzero(bad, as_tuple=True)[0]
    slot = torch.stack([l0, l1, l2], dim=-1)[idx].argmin(dim=-1)
    merge = torch.stack([f[idx, slot], f[idx, (slot + 1) % 3]], dim=1)
    new = connected_labels(merge, vertices.shape[0])[f]
    keep = (new[:, 0] != new[:, 1]) & (new[:, 1] != new[:, 2]) & (new[:, 0] != new[:, 2])
    return new[keep].to(faces.dtype)


def face_areas(vertices: torch.Tensor, faces: torch.Tensor) -> torch.Tensor:
    f = faces.long()
    p0 = vertices[f[:, 0]]
    return 0.5 * torch.linalg.cross(vertices[f[:, 1]] - p0, vertices[f[:, 2]] - p0).norm(dim=-1)


def surface_area(vertices: torch.Tensor, faces: torch.Tensor) -> float:
    return float(face_areas(vertices.double(), faces).sum()) if faces.numel() else 0.0


def signed_volume(vertices: torch.Tensor, faces: torch.Tensor) -> float:
    """The enclosed volume of a closed mesh (divergence theorem; positive for outward winding)."""
    if faces.numel() == 0:
        return 0.0
    v = vertices.double()
    f = faces.long()
    return float((v[f[:, 0]] * torch.linalg.cross(v[f[:, 1]], v[f[:, 2]])).sum() / 6.0)


def euler_characteristic(num_vertices: int, faces: torch.Tensor) -> int:
    """V - E + F over the vertices the faces use (2 for a closed genus-0 surface)."""
    if faces.numel() == 0:
        return 0
    used = int(torch.unique(faces.long()).numel())
    edges, _ = unique_edges(faces, num_vertices)
    return used - int(edges.shape[0]) + int(faces.shape[0])


def is_closed(faces: torch.Tensor, num_vertices: int) -> bool:
    """Every edge used by exactly two faces."""
    _, counts = unique_edges(faces, num_vertices)
    return bool(counts.numel()) and bool((counts == 2).all())
