"""Voxel grid -> triangle mesh, the two algorithms of ComfyUI's VoxelToMesh / VoxelToMeshBasic
(`comfy_extras/nodes_hunyuan3d.py`: `voxel_to_mesh`, `voxel_to_mesh_surfnet`), written here
vectorised, with ComfyUI's vertex and face order.

The grid is `[D, H, W]` indexed (z, y, x) (what VAEDecodeHunyuan3D gives); the vertices come out
as (x, y, z), centred and scaled by half the longest side (`(p - s/2) / (s/2)`, s = max(D, H, W)).

- `blocky_mesh` ("basic"): every voxel above the threshold whose neighbour across a face is not
  (outside the grid counts as empty) contributes that face as a quad of 4 new vertices at the
  voxel's corners, two triangles `(0, 1, 2)`, `(0, 2, 3)`; faces grouped by direction (+x, -x,
  +y, -y, +z, -z in (z, y, x) index order: (0,0,1), (0,0,-1), (0,1,0), ...), within one
  direction all first triangles then all second ones, voxels in raster order. An empty grid
  gives ComfyUI's placeholder: one zero vertex and one zero face.
- `surface_net` ("surface net", Gibson 1998, "Constrained Elastic Surface Nets"): the grid padded
  by one empty voxel; every cell of 2x2x2 samples with samples on both sides of the threshold
  gets one vertex, the mean of the points where its 12 edges cross the threshold (linear
  interpolation; the edge midpoint where both ends are equal), in the cell's frame; vertices are
  numbered by the first crossing edge of their cell (ComfyUI's dictionary order), then raster
  order; each axis pair (z,y), (z,x), (y,x) joins the cells c, c+a, c+b, c+a+b that all carry a
  vertex into a quad, split into two triangles whose winding follows the cell's inside-minus-
  outside corner direction dotted with `a x b`.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

# (dz, dy, dx) face normals and each face's corners, as ComfyUI orders them.
_FACE_DIRECTIONS = ((0, 0, 1), (0, 0, -1), (0, 1, 0), (0, -1, 0), (1, 0, 0), (-1, 0, 0))
_FACE_CORNERS = (
    ((0, 0, 1), (0, 1, 1), (1, 1, 1), (1, 0, 1)),
    ((0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0)),
    ((0, 1, 0), (1, 1, 0), (1, 1, 1), (0, 1, 1)),
    ((0, 0, 0), (0, 0, 1), (1, 0, 1), (1, 0, 0)),
    ((1, 0, 1), (1, 1, 1), (1, 1, 0), (1, 0, 0)),
    ((0, 1, 0), (0, 1, 1), (0, 0, 1), (0, 0, 0)),
)
# A cell's 8 corners (dz, dy, dx) and its 12 edges between them, in ComfyUI's order.
_CELL_CORNERS = ((0, 0, 0), (1, 0, 0), (0, 1, 0), (1, 1, 0), (0, 0, 1), (1, 0, 1), (0, 1, 1), (1, 1, 1))
_CELL_EDGES = ((0, 1), (0, 2), (0, 4), (1, 3), (1, 5), (2, 3), (2, 6), (3, 7), (4, 5), (4, 6), (5, 7), (6, 7))
_AXIS_PAIRS = ((0, 1), (0, 2), (1, 2))


def _normalised(vertices: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """(z, y, x) grid coordinates -> centred, scaled (x, y, z)."""
    half = max(shape) / 2
    vertices = vertices - half
    if half > 0:
        vertices = vertices / half
    return torch.fliplr(vertices)


def blocky_mesh(voxels: torch.Tensor, threshold: float = 0.5) -> tuple[torch.Tensor, torch.Tensor]:
    """`[D, H, W]` -> (vertices `[V, 3]` float32, faces `[F, 3]` int64); see the module docstring."""
    voxels = voxels.cpu()
    solid = voxels > threshold
    padded = F.pad(solid.to(torch.uint8), (1, 1, 1, 1, 1, 1))
    cells = torch.nonzero(solid)  # [S, 3] (z, y, x), raster order
    vertices, faces = [], []
    count = 0
    for direction, corners in zip(_FACE_DIRECTIONS, _FACE_CORNERS):
        neighbour = cells + torch.tensor(direction) + 1
        exposed = cells[padded[neighbour[:, 0], neighbour[:, 1], neighbour[:, 2]] == 0]  # [E, 3]
        if exposed.shape[0] == 0:
            continue
        vertices.append((exposed[:, None, :] + torch.tensor(corners)[None]).reshape(-1, 3))
        quads = torch.arange(count, count + 4 * exposed.shape[0]).reshape(-1, 4)
        faces.append(quads[:, [0, 1, 2]])
        faces.append(quads[:, [0, 2, 3]])
        count += 4 * exposed.shape[0]
    if not vertices:
        return _normalised(torch.zeros(1, 3), voxels.shape), torch.zeros(1, 3, dtype=torch.long)
    return _normalised(torch.cat(vertices).float(), voxels.shape), torch.cat(faces)


def surface_net(voxels: torch.Tensor, threshold: float = 0.5) -> tuple[torch.Tensor, torch.Tensor]:
    """`[D, H, W]` -> (vertices `[V, 3]` float32, faces `[F, 3]` int64); see the module docstring."""
    voxels = voxels.cpu().float()
    depth, height, width = voxels.shape
    padded = F.pad(voxels, (1, 1, 1, 1, 1, 1))
    corners = torch.tensor(_CELL_CORNERS)  # [8, 3]
    # Corner samples of every cell, cells in raster order: [D*H*W, 8].
    values = torch.stack([padded[dz:dz + depth, dy:dy + height, dx:dx + width].reshape(-1)
                          for dz, dy, dx in _CELL_CORNERS], dim=1)
    signs = values > threshold
    active = signs.any(dim=1) & (~signs).any(dim=1)
    empty = torch.zeros(0, 3), torch.zeros(0, 3, dtype=torch.long)
    if not bool(active.any()):
        return empty
    index = torch.nonzero(active)[:, 0]
    cells = torch.stack([index // (height * width), index // width % height, index % width], dim=1)  # [A, 3]
    signs, values = signs[active], values[active]
    edges = torch.tensor(_CELL_EDGES)  # [12, 2]
    first, second = edges[:, 0], edges[:, 1]
    crossing = signs[:, first] != signs[:, second]  # [A, 12]
    v1, v2 = values[:, first], values[:, second]
    denom = v2 - v1
    t = torch.where(denom != 0, (threshold - v1) / torch.where(denom != 0, denom, torch.ones_like(denom)),
                    torch.full_like(denom, 0.5))
    p1, p2 = corners[first].float(), corners[second].float()  # [12, 3]
    points = p1[None] + t[..., None] * (p2 - p1)[None]  # [A, 12, 3]
    counts = crossing.sum(dim=1, keepdim=True).float()
    positions = (points * crossing[..., None]).sum(dim=1) / counts + cells.float()  # [A, 3]
    # ComfyUI numbers vertices in the order cells first appear edge by edge.
    first_edge = crossing.float().argmax(dim=1)
    order = torch.sort(first_edge * cells.shape[0] + torch.arange(cells.shape[0]), stable=True).indices
    vertex_of = torch.empty(cells.shape[0], dtype=torch.long)
    vertex_of[order] = torch.arange(cells.shape[0])
    vertices = positions[order]
    # Dense lookup cell -> vertex (-1: none), one slot past each side for the neighbours.
    lookup = torch.full((depth + 1, height + 1, width + 1), -1, dtype=torch.long)
    lookup[cells[:, 0], cells[:, 1], cells[:, 2]] = vertex_of
    inside = signs.float()
    inside_mean = inside @ corners.float() / inside.sum(dim=1, keepdim=True)
    outside_mean = (1 - inside) @ corners.float() / (1 - inside).sum(dim=1, keepdim=True)
    gradients = inside_mean - outside_mean  # [A, 3] (z, y, x)
    axes = torch.eye(3, dtype=torch.long)
    faces = []
    for a, b in _AXIS_PAIRS:
        ring = [cells, cells + axes[a], cells + axes[b], cells + axes[a] + axes[b]]
        ids = torch.stack([lookup[c[:, 0], c[:, 1], c[:, 2]] for c in ring], dim=1)  # [A, 4]
        valid = (ids >= 0).all(dim=1)
        ids = ids[valid]
        if ids.shape[0] == 0:
            continue
        normal = torch.linalg.cross(axes[a].float(), axes[b].float())
        positive = (gradients[valid] @ normal) > 0
        v0, v1_, v2_, v3 = ids.unbind(1)
        tri_a = torch.where(positive[:, None], torch.stack([v0, v1_, v3], 1), torch.stack([v0, v3, v1_], 1))
        tri_b = torch.where(positive[:, None], torch.stack([v0, v3, v2_], 1), torch.stack([v0, v2_, v3], 1))
        faces.append(torch.stack([tri_a, tri_b], dim=1).reshape(-1, 3))
    faces_out = torch.cat(faces) if faces else torch.zeros(0, 3, dtype=torch.long)
    return _normalised(vertices, voxels.shape), faces_out
