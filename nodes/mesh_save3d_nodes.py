"""Today's ComfyUI's mesh nodes of comfy_extras/nodes_save_3d.py (read for behaviour; the work is
comfy_core/mesh/ and nodes/mesh.py's GLB writer): MeshToFile3D, RotateMesh, MergeMeshes and
GetMeshInfo.

* MeshToFile3D: the first batch item as an in-memory GLB `File3D` (FILE_3D_GLB), with its uvs,
  colours, normals and texture (a larger batch: the first item, with a warning; an empty item is
  an error).
* RotateMesh: Euler XYZ (degrees; X, then Y, then Z about the world axes) or a (w, x, y, z)
  quaternion, normalised (zero length is an error); vertices and normals turn, zero angles or the
  identity quaternion return the mesh itself.
* MergeMeshes: the first item of each connected mesh (2 to 50, `mesh0`, `mesh1`, ...) in one
  single-item mesh: face indices offset, uvs filled with zeros and colours with ones (white, as
  many channels as the widest) where a part lacks them, the first texture kept.
* GetMeshInfo: the mesh unchanged and a text of its vertex / face counts (per item for a batch)
  and attributes, shown on the node (progress text and a text preview).
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any

from graph.v3_schema import Autogrow, ComboOption, DynamicCombo, Float, Output, Socket, v3_node
from nodes.mesh import MESH, Mesh, glb_bytes
from nodes.mesh_postprocess_nodes import mesh_input, send_progress_text

MODULE = "comfy_extras.nodes_save_3d"
FILE_3D_GLB = "FILE_3D_GLB"


@v3_node("MeshToFile3D", display_name="Create 3D File (from Mesh)", category="3d", python_module=MODULE,
         search_aliases=("mesh to glb", "mesh to file", "export mesh"),
         description=("Serialize a mesh to a GLB File3D object for Save / Preview 3D nodes, "
                      "carrying its UVs, colors, normals, texture, normal/occlusion/emissive "
                      "maps and material. Supports one item per batch only."),
         inputs=[Socket("mesh", MESH)], outputs=[Output(FILE_3D_GLB, "model_3d")])
def mesh_to_file_3d(mesh: Any) -> tuple[Any]:
    from io import BytesIO

    from comfy_core.mesh.file3d import File3D

    mesh = mesh_input(mesh)
    if mesh.vertices.shape[0] > 1:
        logging.warning("MeshToFile3D supports one item per batch only. Got %d; using first.", mesh.vertices.shape[0])
    item = mesh.item(0) if mesh.vertices.shape[0] else None
    if item is None or item["vertices"].shape[0] == 0 or item["faces"].shape[0] == 0:
        raise ValueError("MeshToFile3D: mesh is empty (no vertices/faces).")
    return (File3D(BytesIO(glb_bytes(**item)), file_format="glb"),)


def _angle(name: str) -> Any:
    return Float(name, default=0.0, min=-360.0, max=360.0, step=0.1,
                 tooltip=f"Rotation around the {name[-1].upper()} axis in degrees.")


def _unit(name: str, default: float) -> Any:
    return Float(name, default=default, min=-1.0, max=1.0, step=0.001)


@v3_node("RotateMesh", display_name="Rotate Mesh", category="3d/mesh", python_module=MODULE,
         description=("Rotate a mesh. Euler XYZ applies X then Y then Z about the world axes (degrees). "
                      "Quaternion is (w, x, y, z), auto-normalized."),
         inputs=[Socket("mesh", MESH),
                 DynamicCombo("mode", (
                     ComboOption("euler_xyz", (_angle("angle_x"), _angle("angle_y"), _angle("angle_z"))),
                     ComboOption("quaternion",
                                 (_unit("qw", 1.0), _unit("qx", 0.0), _unit("qy", 0.0), _unit("qz", 0.0)))))],
         outputs=[Output(MESH, "mesh")])
def rotate_mesh(mesh: Any, mode: dict) -> tuple[Mesh]:
    from comfy_core.mesh.transform import euler_xyz_matrix, quaternion_matrix, rotate

    mesh = mesh_input(mesh)
    name = mode["mode"]
    if name == "euler_xyz":
        matrix = euler_xyz_matrix(mode["angle_x"], mode["angle_y"], mode["angle_z"])
    elif name == "quaternion":
        matrix = quaternion_matrix(mode["qw"], mode["qx"], mode["qy"], mode["qz"])
    else:
        raise ValueError(f"RotateMesh: unknown mode {name!r}")
    if matrix is None:
        return (mesh,)
    normals = rotate(mesh.normals, matrix) if mesh.normals is not None else None
    return (dataclasses.replace(mesh, vertices=rotate(mesh.vertices, matrix), normals=normals),)


@v3_node("MergeMeshes", display_name="Merge Meshes", category="3d/mesh", python_module=MODULE,
         description=("Concatenate N meshes into one by offsetting face indices and stacking verts, "
                      "faces, uvs, and colors."),
         inputs=[Autogrow("meshes", Socket("mesh", MESH), prefix="mesh", min=2, max=50)],
         outputs=[Output(MESH, "mesh")])
def merge_meshes(meshes: dict) -> tuple[Mesh]:
    import torch

    parts = [mesh_input(m, f"meshes.{k}") for k, m in meshes.items()]
    if not parts:
        raise ValueError("MergeMeshes: need at least one mesh")
    any_uvs = any(m.uvs is not None for m in parts)
    any_colors = any(m.vertex_colors is not None for m in parts)
    channels = max((int(m.vertex_colors.shape[-1]) for m in parts if m.vertex_colors is not None), default=3)
    verts, faces, uvs, colors = [], [], [], []
    texture = None
    offset = 0
    for m in parts:
        item = m.item(0)
        v, f = item["vertices"].cpu(), item["faces"].cpu()
        verts.append(v)
        faces.append(f + offset)
        offset += v.shape[0]
        if any_uvs:
            uvs.append(item["uvs"].cpu() if item["uvs"] is not None else v.new_zeros((v.shape[0], 2)))
        if any_colors:
            c = item["vertex_colors"].cpu() if item["vertex_colors"] is not None else v.new_ones((v.shape[0], channels))
            if c.shape[-1] < channels:
                c = torch.cat([c, c.new_ones((c.shape[0], channels - c.shape[-1]))], dim=-1)
            colors.append(c)
        if m.texture is not None:
            if texture is None:
                texture = m.texture.cpu()
            else:
                logging.warning("MergeMeshes: dropping extra texture from input; only one texture is kept.")
    return (Mesh(vertices=torch.cat(verts)[None], faces=torch.cat(faces)[None],
                 uvs=torch.cat(uvs)[None] if any_uvs else None,
                 vertex_colors=torch.cat(colors)[None] if any_colors else None, texture=texture),)


def _fmt(n: int) -> str:
    """1234567 -> "1,234,567 (1.23M)"; 12345 -> "12,345 (12.3K)"; small numbers plain."""
    text = f"{n:,}"
    if n >= 1_000_000:
        text += f" ({n / 1_000_000:.2f}M)"
    elif n >= 10_000:
        text += f" ({n / 1_000:.1f}K)"
    return text


def mesh_info_text(mesh: Mesh) -> str:
    """GetMeshInfo's text (module docstring)."""
    batch = int(mesh.vertices.shape[0])
    if mesh.vertex_counts is not None:
        v_counts = [int(x) for x in mesh.vertex_counts.tolist()]
        f_counts = [int(x) for x in mesh.face_counts.tolist()]
    else:
        v_counts = [int(mesh.vertices.shape[1])] * batch
        f_counts = [int(mesh.faces.shape[1])] * batch
    attrs = []
    for name in ("uvs", "vertex_colors", "normals", "tangents", "texture", "metallic_roughness", "normal_map"):
        t = getattr(mesh, name, None)
        if t is not None:
            attrs.append(f"{name} {int(t.shape[-3])}×{int(t.shape[-2])}"
                         if name in ("texture", "metallic_roughness", "normal_map") else name)
    lines = []
    if batch > 1:
        lines += [f"Batch:      {batch} meshes", f"Vertices:   {_fmt(sum(v_counts))} total",
                  f"Faces:      {_fmt(sum(f_counts))} total"]
        lines += [f"  [{i}]  {v_counts[i]:>10,} verts  ·  {f_counts[i]:>10,} faces" for i in range(batch)]
    else:
        lines += [f"Vertices:   {_fmt(v_counts[0])}", f"Faces:      {_fmt(f_counts[0])}"]
    lines.append(f"Attributes: {', '.join(attrs) if attrs else 'none'}")
    return "\n".join(lines)


@v3_node("GetMeshInfo", display_name="Get Mesh Info", category="3d/mesh", python_module=MODULE,
         inputs=[Socket("mesh", MESH)], outputs=[Output(MESH, "mesh"), Output("STRING", "info")],
         hidden=[("unique_id", "UNIQUE_ID")])
def get_mesh_info(mesh: Any, unique_id: Any = None) -> dict:
    mesh = mesh_input(mesh)
    info = mesh_info_text(mesh)
    logging.info("[GetMeshInfo]\n%s", info)
    send_progress_text(unique_id, info)
    return {"ui": {"text": [info]}, "result": (mesh, info)}
