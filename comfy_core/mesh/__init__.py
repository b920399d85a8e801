"""Triangle-mesh maths on plain tensors, the work behind today's ComfyUI's mesh nodes
(comfy_extras/nodes_mesh_postprocess.py, comfy_extras/nodes_save_3d.py,
comfy_extras/mesh3d/postprocess/qem_decimate.py; read for behaviour, written here).

A mesh here is `vertices` [N, 3] float and `faces` [M, 3] int64 (one batch item); the MESH wire
type that batches them is nodes/mesh.py's. Modules:

* `topology` — edges, boundaries, connected components, welding, cleaning, area / volume / Euler
  characteristic;
* `normals` — smooth per-vertex normals and crease splitting;
* `decimate` — quadric-error-metric simplification (parallel rounds of independent collapses);
* `holes` — filling small boundary loops;
* `transform` — rotations (Euler XYZ, quaternions);
* `batch` — padding per-item meshes into a batch;
* `file3d` — ComfyUI's `File3D` value (a 3-D file in memory or on disk);
* `render` — one camera view of a mesh (RenderMesh);
* `remesh` — narrow-band dual-contouring remeshing (RemeshMesh);
* `fileio` — GLB / glTF, OBJ and STL files read into one mesh (Get3DComponents).
"""
