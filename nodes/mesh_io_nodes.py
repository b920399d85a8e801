"""Get3DComponents, "Get 3D Components" (today's ComfyUI, comfy_extras/nodes_mesh_io.py, read for
behaviour): a 3-D file (ComfyUI's File3D: MeshToFile3D's output, or a pack's) parsed into an
editable MESH, the counterpart of MeshToFile3D. GLB / glTF, OBJ and STL are read
(comfy_core/mesh/fileio.py); the format is the file's own, else sniffed from its first bytes;
FBX and USDZ are refused. All primitives of the scene are merged into one single-item mesh with
their transforms applied, with uvs, vertex colours, normals and the first material's base-colour
texture (the MESH here has no slots for the other material maps)."""
from __future__ import annotations

import logging
import os
from typing import Any

from graph.v3_schema import Output, Socket, v3_node
from nodes.errors import NodeInputError, describe
from nodes.mesh import MESH, Mesh

MODULE = "comfy_extras.nodes_mesh_io"
FILE_TYPES = "FILE_3D_GLB,FILE_3D_GLTF,FILE_3D_OBJ,FILE_3D_STL,FILE_3D"


@v3_node("Get3DComponents", display_name="Get 3D Components", category="3d", python_module=MODULE,
         description=("Parse a 3D model file (GLB, GLTF, OBJ, STL) into an editable MESH for the "
                      "mesh-processing nodes (decimate, remesh, UV unwrap, bake, ...). All scene "
                      "nodes/primitives are merged into one mesh with their transforms applied; "
                      "textures and material factors come from the first material. "
                      "Counterpart of MeshToFile3D."),
         search_aliases=("file 3d to mesh", "extract mesh", "convert 3d", "parse glb", "import mesh",
                         "load mesh from file", "file to mesh"),
         experimental=True,
         inputs=[Socket("model_3d", FILE_TYPES, tooltip="3D model file from Load 3D or another 3D node. "
                                                        "FBX/USDZ are not supported - convert to GLB first.")],
         outputs=[Output(MESH, "mesh")])
def get_3d_components(model_3d: Any) -> tuple[Mesh]:
    import torch

    from comfy_core.mesh import fileio

    if not callable(getattr(model_3d, "get_bytes", None)):
        raise NodeInputError("model_3d", "a 3D file (File3D)", describe(model_3d))
    data = model_3d.get_bytes()
    fmt = (getattr(model_3d, "format", "") or fileio.sniff_format(data)).lower()
    if fmt in ("fbx", "usdz"):
        raise ValueError(f"Get3DComponents: .{fmt} parsing is not supported; convert the model to GLB/GLTF first")
    texture = None
    if fmt in ("glb", "gltf"):
        base_dir = os.path.dirname(model_3d.get_source()) if getattr(model_3d, "is_disk_backed", False) else None
        prims, material = fileio.read_gltf(data, base_dir)
        if not prims:
            raise ValueError("Get3DComponents: no triangle geometry found in the glTF scene")
        texture = material["texture"]
    elif fmt == "obj":
        prims = [fileio.read_obj(data)]
    elif fmt == "stl":
        prims = [fileio.read_stl(data)]
    else:
        raise ValueError(f"Get3DComponents: unsupported or unrecognized format {fmt!r} "
                         "(supported: glb, gltf, obj, stl)")
    merged = fileio.merge_primitives(prims)
    count = merged["vertices"].shape[0]
    if int(merged["faces"].max()) >= count:
        raise ValueError(f"Get3DComponents: face index {int(merged['faces'].max())} out of range for {count} "
                         f"vertices (corrupt file?)")

    def batch(array):
        return torch.from_numpy(array)[None] if array is not None else None

    logging.info("Get3DComponents: %s -> %d vertices, %d faces (%d primitives)", fmt, count,
                 merged["faces"].shape[0], len(prims))
    return (Mesh(vertices=batch(merged["vertices"]), faces=batch(merged["faces"]), uvs=batch(merged["uvs"]),
                 vertex_colors=batch(merged["colors"]), normals=batch(merged["normals"]), texture=batch(texture)),)
