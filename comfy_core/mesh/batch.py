"""Per-item meshes padded into one batch: behaviour of today's ComfyUI's
`pack_variable_mesh_batch` (comfy_extras/nodes_save_3d.py); written here. Every per-vertex
attribute (colours, uvs, normals) is padded with zeros to the longest item; `vertex_counts` /
`face_counts` (int64) record each item's own sizes."""
from __future__ import annotations

from typing import Any, Sequence

import torch


def _padded(rows: Sequence[torch.Tensor], length: int) -> torch.Tensor:
    out = rows[0].new_zeros((len(rows), length, rows[0].shape[1]))
    for i, r in enumerate(rows):
        out[i, :r.shape[0]] = r
    return out


def pack_variable(vertices: Sequence[torch.Tensor], faces: Sequence[torch.Tensor],
                  colors: Sequence[torch.Tensor] | None = None, uvs: Sequence[torch.Tensor] | None = None,
                  normals: Sequence[torch.Tensor] | None = None) -> dict[str, Any]:
    """The fields of a padded MESH batch: vertices, faces, vertex_colors, uvs, normals,
    vertex_counts, face_counts (attributes not given are None)."""
    longest_v = max(v.shape[0] for v in vertices)
    longest_f = max(f.shape[0] for f in faces)
    fields: dict[str, Any] = {
        "vertices": _padded(vertices, longest_v), "faces": _padded(faces, longest_f),
        "vertex_counts": torch.tensor([v.shape[0] for v in vertices], dtype=torch.int64, device=vertices[0].device),
        "face_counts": torch.tensor([f.shape[0] for f in faces], dtype=torch.int64, device=faces[0].device)}
    for name, rows in (("vertex_colors", colors), ("uvs", uvs), ("normals", normals)):
        if rows is not None:
            for i, r in enumerate(rows):
                if r.shape[0] != vertices[i].shape[0]:
                    raise ValueError(f"{name}[{i}] has {r.shape[0]} entries, expected {vertices[i].shape[0]} "
                                     f"(1:1 with vertices)")
        fields[name] = _padded(rows, longest_v) if rows is not None else None
    return fields
