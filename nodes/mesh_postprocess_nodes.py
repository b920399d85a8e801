"""Today's ComfyUI's mesh post-processing nodes (comfy_extras/nodes_mesh_postprocess.py, read for
behaviour; the work is comfy_core/mesh/): DecimateMesh, RemeshMesh, FillHoles, WeldVertices,
MeshSmoothNormals, MeshTextureToImage and RenderMesh.

Each node works item by item on a MESH batch (nodes/mesh.py), on the CPU (results go back to the
device the mesh came on). DecimateMesh, RemeshMesh, FillHoles and WeldVertices return the items
padded into a batch with their own `vertex_counts` / `face_counts` (ComfyUI's
`pack_variable_mesh_batch`), keeping the vertex colours (when every item has them) and the
texture, and dropping uvs and normals, which the new topology no longer fits.
DecimateMesh and RemeshMesh show "faces: 1.2K → 300  (-75%)" on themselves (ComfyUI's progress
text). RemeshMesh works in ComfyUI's fixed domain, a cube of side (resolution + 3 x band) /
resolution about the origin (inputs are expected inside [-0.5, 0.5]); its "solid" sign mode and
"manifold" option are refused (comfy_core/mesh/remesh.py says why).
MeshSmoothNormals attaches area-weighted smooth normals; with `crease_angle` below 180 it splits
vertices along sharper edges, carrying colours and uvs to the copies (empty items are dropped).
MeshTextureToImage splits a mesh's texture maps into IMAGEs (the MESH here carries only the base
colour: metallic and roughness come back black, occlusion white and the normal map flat, as
ComfyUI's do for a mesh without those maps). RenderMesh draws the first item from a viewer's camera
(or a default front view framing the mesh) as texture, vertex colours, clay, normals or depth, with
a mask of the covered pixels (comfy_core/mesh/render.py).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from graph.context import current
from graph.v3_schema import Boolean, Combo, ComboOption, DynamicCombo, Float, Int, Output, Socket, Widget, v3_node
from nodes.errors import NodeInputError, describe
from nodes.image_batch import PROGRESS_TEXT_EVENT, progress_text_payload
from nodes.mesh import MESH, Mesh

MODULE = "comfy_extras.nodes_mesh_postprocess"
CATEGORY = "3d/mesh"


def mesh_input(value: Any, name: str = "mesh") -> Mesh:
    if not isinstance(value, Mesh):
        raise NodeInputError(name, "a MESH", describe(value))
    return value


def mesh_items(mesh: Mesh) -> list[dict[str, Any]]:
    """Each batch item cut to its own sizes (Mesh.item)."""
    return [mesh.item(i) for i in range(int(mesh.vertices.shape[0]))]


def packed_mesh(vertices: list, faces: list, colors: list | None = None, uvs: list | None = None,
                normals: list | None = None, texture: Any = None) -> Mesh:
    from comfy_core.mesh.batch import pack_variable

    return Mesh(**pack_variable(vertices, faces, colors, uvs, normals), texture=texture)


def process_items(mesh: Mesh, work: Callable[[Any, Any, Any], tuple]) -> Mesh:
    """ComfyUI's `_process_mesh_batch`: `work(vertices, faces, colours)` per item, the results
    padded into a batch (the module docstring)."""
    out_v, out_f, out_c = [], [], []
    for item in mesh_items(mesh):
        device = item["vertices"].device  # the work runs on the CPU; results go back where they came from
        colors = item["vertex_colors"]
        v, f, c = work(item["vertices"].cpu(), item["faces"].cpu(), colors.cpu() if colors is not None else None)
        out_v.append(v.to(device))
        out_f.append(f.to(device))
        if c is not None:
            out_c.append(c.to(device))
    if not out_v:
        return mesh
    return packed_mesh(out_v, out_f, out_c if len(out_c) == len(out_v) else None, texture=mesh.texture)


def _count(n: int) -> str:
    """853, 12.3K, 1.23M."""
    if n >= 1_000_000:
        return f"{n / 1_000_000:.2f}".rstrip("0").rstrip(".") + "M"
    if n >= 1_000:
        return f"{n / 1_000:.1f}".rstrip("0").rstrip(".") + "K"
    return str(n)


def face_change_text(before: int, after: int) -> str:
    """ComfyUI's `_fmt_face_change`: 'faces: 1.2K → 300  (-75%)'."""
    share = f"  ({(after - before) / before * 100:+.0f}%)" if before else ""
    return f"faces: {_count(before)} → {_count(after)}{share}"


def send_progress_text(unique_id: Any, text: str) -> None:
    ctx = current()
    if unique_id and ctx is not None:
        ctx.send(PROGRESS_TEXT_EVENT, progress_text_payload(str(unique_id), text))


_QEM_OPTIONS = [
    Float("line_quadric_weight", default=0.0, min=0.0, max=100.0, step=0.1,
          tooltip="Per-edge line-quadric weight; preserves sharp ridges/valleys. 0 = off."),
    Float("feature_edge_quadric_weight", default=0.0, min=0.0, max=1000.0, step=1.0,
          tooltip="Extra quadric weight on dihedral feature edges (creases). 0 = off."),
    Float("feature_edge_min_dihedral_deg", default=30.0, min=0.0, max=180.0, step=1.0,
          tooltip="Minimum dihedral angle (degree) to count an edge as a feature edge."),
    Boolean("clamp_v_to_edge", default=True,
            tooltip="Project the QEM-optimal position onto the collapsed edge segment."),
]


@v3_node("DecimateMesh", display_name="Decimate Mesh", category=CATEGORY, python_module=MODULE,
         description=("Simplifies a mesh to a target face count using QEM, on the active compute "
                      "device. 'midpoint' is the cumesh-faithful preset (best quality, preserves thin "
                      "features / hair); 'qem' places vertices at the QEM optimum with line/feature-edge "
                      "controls. Output stays welded."),
         inputs=[Socket("mesh", MESH),
                 Int("target_face_count", default=200_000, min=0, max=50_000_000,
                     tooltip="Target max faces. 0 disables."),
                 DynamicCombo("placement_mode", (ComboOption("midpoint"), ComboOption("qem", tuple(_QEM_OPTIONS))),
                              display_name="placement_mode",
                              tooltip="midpoint: cumesh-faithful (recommended). qem: QEM-optimal placement.")],
         outputs=[Output(MESH, "mesh")], hidden=[("unique_id", "UNIQUE_ID")])
def decimate_mesh(mesh: Any, target_face_count: int, placement_mode: dict, unique_id: Any = None) -> tuple[Mesh]:
    """Each item with more than `target_face_count` faces (when that is > 0) simplified
    (comfy_core/mesh/decimate.py); the others pass through."""
    from comfy_core.mesh.decimate import QEMConfig, qem_simplify

    mesh = mesh_input(mesh)
    mode = placement_mode.get("placement_mode", "midpoint")
    if mode == "qem":
        get = placement_mode.get
        config = QEMConfig(placement_mode="qem", line_quadric_weight=float(get("line_quadric_weight", 0.0)),
                           feature_edge_quadric_weight=float(get("feature_edge_quadric_weight", 0.0)),
                           feature_edge_min_dihedral_deg=float(get("feature_edge_min_dihedral_deg", 30.0)),
                           clamp_v_to_edge=bool(get("clamp_v_to_edge", True)))
    else:
        config = QEMConfig()
    counts = {"in": 0, "out": 0}

    def work(v, f, c):
        counts["in"] += int(f.shape[0])
        if target_face_count > 0 and f.shape[0] > target_face_count:
            v, f, c = qem_simplify(v, f, int(target_face_count), colors=c, config=config)
        counts["out"] += int(f.shape[0])
        return v, f, c

    result = process_items(mesh, work)
    send_progress_text(unique_id, face_change_text(counts["in"], counts["out"]))
    return (result,)


_QEF_TIP = ("QEF (Quadratic Error Function) vertex placement: sharp edges on hard-surface input, "
            "jagged creases on organic input.")
_SIGN_MODES = (
    ComboOption("udf", (
        Boolean("qef", default=False, advanced=True, tooltip=_QEF_TIP),
        Boolean("drop_inverted_components", default=False, advanced=True,
                tooltip="Drop inward-normal (negative-volume) closed components — the UDF inner shell."),
        Boolean("drop_enclosed_components", default=False, advanced=True,
                tooltip="Drop components inside the largest's bbox that fail a point-in-mesh raycast. "
                        "Disable for legitimate nested parts."))),
    ComboOption("sdf", (
        Boolean("qef", default=True,
                tooltip="QEF (Quadratic Error Function) dual-vertex placement (recovers sharp features) vs "
                        "edge-crossing centroid."),
        Boolean("manifold", default=False,
                tooltip="Manifold Dual Contouring: 1-4 dual verts/voxel for multi-sheet cases. Slower."))),
    ComboOption("solid", (
        Float("fill", default=20.0, min=0.0, max=1000.0, step=1.0,
              tooltip="Cost of closing an opening relative to following the surface. Lower closes "
                      "larger openings (0 puts a lid on a cup); higher only closes small holes and cracks."),
        Boolean("qef", default=False, advanced=True, tooltip=_QEF_TIP))),
)


@v3_node("RemeshMesh", display_name="Remesh Mesh (Narrow-Band DC)", category=CATEGORY, python_module=MODULE,
         description=("Re-extracts a uniformly tessellated mesh via a narrow-band distance field + Dual "
                      "Contouring, on the active compute device. Normalizes messy / non-manifold / "
                      "self-intersecting topology; run before Decimate Mesh to hit an exact face count. "
                      "Output stays welded."),
         inputs=[Socket("mesh", MESH),
                 Int("resolution", default=512, min=32, max=2048,
                     tooltip="Voxel grid resolution (output density). 256 ~ 100k faces, 512 ~ 1M. "
                             "For an exact face count, follow with Decimate Mesh."),
                 DynamicCombo("sign_mode", _SIGN_MODES, display_name="sign_mode",
                              tooltip="udf: robust to messy/non-manifold input. sdf: clean single "
                                      "surface with QEF (Quadratic Error Function) sharp-feature recovery, but needs "
                                      "consistent winding. solid: one watertight solid from messy input: a global "
                                      "inside/outside graph cut (CelloCut) removes double shells and closes small "
                                      "holes. Slower."),
                 Float("band", default=1.0, min=0.5, max=4.0, step=0.1, advanced=True,
                       tooltip="Narrow-band width in voxel units. In udf mode also offsets the surface; in solid "
                               "mode it is the closing radius: creases are filleted and gaps bridged at this size, "
                               "the surface sits half a voxel out."),
                 Float("project_back", default=0.0, min=0.0, max=1.0, step=0.05, advanced=True,
                       tooltip="Linearly interpolate vertices toward the original surface (0 = pure DC, 1 = snapped)."),
                 Boolean("fix_poles", default=False, advanced=True,
                         tooltip="Collapse valence-3 vertex pairs (DC T-junction artifact)."),
                 Int("smooth_iters", default=0, min=0, max=20,
                     tooltip="Taubin smoothing iterations (0 = off). 2-3 cleans DC staircase-like artifacts; "
                             "higher over-smooth QEF edges."),
                 Float("drop_small_components", default=0.01, min=0.0, max=0.5, step=0.005, advanced=True,
                       tooltip="Drop components below this fraction of the largest's face count. 0 disables."),
                 Int("precluster_max_verts", default=20_000_000, min=0, max=100_000_000, advanced=True,
                     tooltip="Cap input vertex count before the field queries, inputs above this are "
                             "cluster-decimated to it first. Prevents OOM on huge meshes.")],
         outputs=[Output(MESH, "mesh")], hidden=[("unique_id", "UNIQUE_ID")])
def remesh_mesh(mesh: Any, resolution: int, sign_mode: dict, band: float, project_back: float, fix_poles: bool,
                smooth_iters: int, drop_small_components: float, precluster_max_verts: int,
                unique_id: Any = None) -> tuple[Mesh]:
    """Each item remeshed (comfy_core/mesh/remesh.py); faces come out int32, as ComfyUI's."""
    import torch

    from comfy_core.mesh.remesh import cluster_decimate, remesh

    mesh = mesh_input(mesh)
    mode = sign_mode.get("sign_mode", "udf")
    qef = bool(sign_mode.get("qef", mode == "sdf"))
    manifold = bool(sign_mode.get("manifold", False))
    counts = {"in": 0, "out": 0}

    def work(v, f, c):
        counts["in"] += int(f.shape[0])
        vv, ff = v.float().cpu(), f.long().cpu()
        cc = c.float().cpu() if c is not None else None
        if precluster_max_verts > 0 and vv.shape[0] > precluster_max_verts:
            vv, ff, cc = cluster_decimate(vv, ff, int(precluster_max_verts), cc)
        try:
            rv, rf, rc = remesh(vv, ff, resolution=int(resolution), band=float(band), project_back=float(project_back),
                                qef=qef, sign_mode=mode, manifold=manifold, fix_poles_=bool(fix_poles),
                                smooth_iters=int(smooth_iters), drop_small_components=float(drop_small_components),
                                drop_inverted_components=bool(sign_mode.get("drop_inverted_components", False)),
                                drop_enclosed_components=bool(sign_mode.get("drop_enclosed_components", False)),
                                scale=(resolution + 3.0 * band) / resolution, center=torch.zeros(3), colors=cc)
        except NotImplementedError as exc:
            raise NodeInputError("sign_mode", "'udf' or 'sdf' without manifold", str(exc)) from None
        counts["out"] += int(rf.shape[0])
        return rv.to(v.dtype), rf.to(torch.int32), rc

    result = process_items(mesh, work)
    send_progress_text(unique_id, face_change_text(counts["in"], counts["out"]))
    return (result,)


@v3_node("FillHoles", display_name="Fill Holes", category=CATEGORY, python_module=MODULE,
         description=("Fills holes up to a max perimeter, preserving existing geometry/UVs. GPU-vectorised with "
                      "auto-corrected winding and loop-averaged centroid colors"),
         inputs=[Socket("mesh", MESH),
                 Float("max_perimeter", default=0.03, min=0.0, step=0.0001,
                       tooltip="Max hole perimeter to fill. 0 disables."),
                 Float("weld_epsilon_rel", default=1e-5, min=0.0, step=1e-6,
                       tooltip="Pre-weld tolerance (fraction of bounding box diagonal); boundary detection "
                               "needs welded vertices. 0 skips."),
                 Int("max_vertices", default=16, min=3, max=1024,
                     tooltip="Cap boundary vertices per cycle; centroid-fan only works for small "
                             "near-planar holes. Keep ≤16."),
                 Boolean("fill_chains", default=False,
                         tooltip="Also fill open chains (not just cycles). Noisy; OFF matches cumesh.")],
         outputs=[Output(MESH, "mesh")])
def fill_holes(mesh: Any, max_perimeter: float, weld_epsilon_rel: float, max_vertices: int,
               fill_chains: bool) -> tuple[Mesh]:
    """Holes filled item by item (comfy_core/mesh/holes.py); `max_perimeter` 0 leaves the items
    as they are (still repacked)."""
    from comfy_core.mesh.holes import fill_holes as fill

    mesh = mesh_input(mesh)

    def work(v, f, c):
        if max_perimeter > 0:
            v, f, c = fill(v, f, max_perimeter=float(max_perimeter), colors=c,
                           weld_epsilon_rel=float(weld_epsilon_rel), fill_chains=bool(fill_chains),
                           max_verts=int(max_vertices))
        return v, f, c

    return (process_items(mesh, work),)


@v3_node("WeldVertices", display_name="Weld Vertices", category=CATEGORY, python_module=MODULE,
         description=("Merge coincident vertices via L_inf grid quantization. Use when a mesh comes in "
                      "unwelded (per-face verts, no shared edges) — pre-pass before FillHoles, "
                      "DecimateMesh, or any topology-aware op. Colors averaged per cluster."),
         inputs=[Socket("mesh", MESH),
                 Float("epsilon_rel", default=1e-5, min=0.0, step=1e-6,
                       tooltip="Weld tolerance (fraction of bbox diagonal). 1e-5 for float dedup; "
                               "1e-3 for visibly-close-but-distinct verts."),
                 Float("epsilon_abs", default=0.0, min=0.0, step=1e-6,
                       tooltip="Absolute weld tolerance (overrides epsilon_rel when > 0).")],
         outputs=[Output(MESH, "mesh")])
def weld_vertices(mesh: Any, epsilon_rel: float, epsilon_abs: float) -> tuple[Mesh]:
    """Vertices in one grid cell merged (comfy_core/mesh/topology.py `weld_vertices`)."""
    from comfy_core.mesh.topology import weld_vertices as weld

    mesh = mesh_input(mesh)
    eps = float(epsilon_abs) if epsilon_abs > 0 else None

    def work(v, f, c):
        v, f, c, _ = weld(v, f, epsilon=eps, epsilon_rel=float(epsilon_rel), colors=c)
        return v, f, c

    return (process_items(mesh, work),)


@v3_node("MeshSmoothNormals", display_name="Smooth Mesh Normals", category=CATEGORY, python_module=MODULE,
         description=("Compute smooth per-vertex normals and attach them to the mesh. Meshes "
                      "without normals are shaded flat (per-face) by glTF viewers; this makes "
                      "them shade smoothly. With crease_angle below 180, edges sharper than the "
                      "threshold are kept hard by splitting vertices along them."),
         inputs=[Socket("mesh", MESH),
                 Float("crease_angle", default=180.0, min=0.0, max=180.0, step=1.0,
                       tooltip="Edges whose dihedral angle exceeds this value (degrees) stay "
                               "hard (vertices are split). 180 = fully smooth; lower "
                               "preserves sharp edges (e.g. ~30-60 for hard-surface).")],
         outputs=[Output(MESH, "mesh")])
def mesh_smooth_normals(mesh: Any, crease_angle: float) -> tuple[Mesh]:
    """See the module docstring (comfy_core/mesh/normals.py)."""
    import torch

    from comfy_core.mesh.normals import crease_split_normals, smooth_vertex_normals

    mesh = mesh_input(mesh)
    items = mesh_items(mesh)
    if crease_angle >= 180.0:
        padded = torch.zeros_like(mesh.vertices)
        for i, item in enumerate(items):
            v, f = item["vertices"], item["faces"]
            if v.shape[0] == 0 or f.shape[0] == 0:
                continue
            padded[i, :v.shape[0]] = smooth_vertex_normals(v.cpu(), f.cpu()).to(padded)
        return (dataclasses.replace(mesh, normals=padded),)
    out_v, out_f, out_n = [], [], []
    out_c: list | None = [] if mesh.vertex_colors is not None else None
    out_uv: list | None = [] if mesh.uvs is not None else None
    for item in items:
        v, f = item["vertices"], item["faces"]
        if v.shape[0] == 0 or f.shape[0] == 0:
            continue
        nv, nf, nn, remap = crease_split_normals(v.cpu(), f.cpu(), float(crease_angle))
        out_v.append(nv.to(mesh.vertices))
        out_f.append(nf.to(mesh.faces))
        out_n.append(nn.to(mesh.vertices))
        if out_c is not None:
            out_c.append(item["vertex_colors"][remap.to(v.device)])
        if out_uv is not None:
            out_uv.append(item["uvs"][remap.to(v.device)])
    if not out_v:
        return (mesh,)
    return (packed_mesh(out_v, out_f, out_c, out_uv, out_n, texture=mesh.texture),)


@v3_node("MeshTextureToImage", display_name="Mesh Texture to Image", category="3d/texturing", python_module=MODULE,
         description=("Extracts a mesh's baked textures as individual IMAGEs: base_color, metallic, "
                      "roughness, occlusion and normal_map. Channels with nothing baked come back "
                      "neutral (occlusion white, normal flat)."),
         inputs=[Socket("mesh", MESH)],
         outputs=[Output("IMAGE", "base_color"), Output("IMAGE", "metallic"), Output("IMAGE", "roughness"),
                  Output("IMAGE", "occlusion"), Output("IMAGE", "normal_map")])
def mesh_texture_to_image(mesh: Any) -> tuple:
    """See the module docstring; a mesh without a texture is an error."""
    import torch

    mesh = mesh_input(mesh)

    def image(tex):
        if tex is None:
            return None
        t = tex.float().clamp(0.0, 1.0).cpu()
        return t[None] if t.ndim == 3 else t

    base = image(mesh.texture)
    if base is None:
        raise ValueError("MeshTextureToImage: mesh has no baseColor texture. Run "
                         "BakeTextureFromVoxel first (PaintMesh only sets vertex colors, not a texture).")
    packed = image(getattr(mesh, "metallic_roughness", None))
    packed = torch.zeros_like(base) if packed is None else packed
    normal_map = image(getattr(mesh, "normal_map", None))
    if normal_map is None:
        normal_map = torch.ones_like(base) * torch.tensor([0.5, 0.5, 1.0])
    metallic = packed[..., 2:3].expand(-1, -1, -1, 3).contiguous()
    roughness = packed[..., 1:2].expand(-1, -1, -1, 3).contiguous()
    occlusion = (packed[..., 0:1].expand(-1, -1, -1, 3).contiguous() if getattr(mesh, "occlusion_in_mr", False)
                 else torch.ones_like(base))
    return (base, metallic, roughness, occlusion, normal_map)


RENDER_MODES = ("auto", "texture", "vertex colors", "solid", "normal", "depth")


def _hex_rgb(color: Any) -> list[float]:
    text = str(color).lstrip("#")
    try:
        return [int(text[i:i + 2], 16) / 255.0 for i in (0, 2, 4)]
    except ValueError:
        raise NodeInputError("background", "a colour #RRGGBB", repr(color)) from None


@v3_node("RenderMesh", display_name="Render Mesh", category=CATEGORY, python_module=MODULE,
         search_aliases=("mesh to image", "render mesh", "preview textured mesh"),
         description=("Ray-casts a single view of a mesh. The camera and optional model transform can come "
                      "from a Load3D / Preview3D viewer."),
         inputs=[Socket("mesh", MESH),
                 Combo("mode", RENDER_MODES,
                       tooltip="What to render. auto: texture if present, else vertex colours, else shaded clay."),
                 Int("width", default=1024, min=64, max=4096, step=8),
                 Int("height", default=1024, min=64, max=4096, step=8),
                 Widget("background", "COLOR", default="#000000"),
                 Socket("model_3d_info", "LOAD3D_MODEL_INFO", optional=True,
                        tooltip="Model transform from the same Load3D / Preview3D viewer. "
                                "Connect it with camera_info to match the viewer framing."),
                 Socket("camera_info", "LOAD3D_CAMERA", optional=True,
                        tooltip="Camera from a Load3D / Preview3D viewer or a Create Camera Info "
                                "node. If none is connected, a default front view is auto-framed.")],
         outputs=[Output("IMAGE", "image"), Output("MASK", "mask")])
def render_mesh(mesh: Any, mode: str, width: int, height: int, background: str = "#000000",
                model_3d_info: Any = None, camera_info: Any = None) -> tuple:
    """The first batch item seen from `camera_info` (position, target, fov, zoom) or from the
    front (+Z, 40-degree field of view, the bounding sphere about the box centre filling it);
    `mode` "auto" takes the texture (with uvs), else the vertex colours, else clay; vertex colours
    are linear and shown as sRGB (power 1/2.2); "depth" is white nearest, black farthest."""
    import logging
    import math

    import torch

    from comfy_core.mesh.render import apply_model_transform, render_view

    mesh = mesh_input(mesh)
    if mode not in RENDER_MODES:
        raise NodeInputError("mode", f"one of {list(RENDER_MODES)}", repr(mode))
    if int(mesh.vertices.shape[0]) > 1:
        logging.warning("RenderMesh: one item per batch only; using the first of %d.", int(mesh.vertices.shape[0]))
    item = mesh.item(0)
    v = item["vertices"].float().cpu()
    f = item["faces"].long().cpu()
    transform = model_3d_info[0] if model_3d_info else None
    if transform is not None:
        v = apply_model_transform(v, transform)
    have_texture = item["texture"] is not None and item["uvs"] is not None
    have_colors = item["vertex_colors"] is not None
    resolved = mode
    if resolved == "auto":
        resolved = "texture" if have_texture else ("vertex colors" if have_colors else "solid")
    options: dict[str, Any] = {}
    if resolved == "texture" and have_texture:
        options.update(uvs=item["uvs"].float().cpu(), texture=item["texture"].float().cpu())
    elif resolved == "vertex colors" and have_colors:
        options["vertex_colors"] = item["vertex_colors"][:, :3].float().cpu().clamp(0.0, 1.0).pow(1.0 / 2.2)
    elif resolved == "normal":
        options["render_normal"] = True
        normals = item["normals"]
        if normals is not None:
            normals = normals.float().cpu()
            if transform is not None:
                normals = apply_model_transform(normals, transform, is_normal=True)
        options["vertex_normals"] = normals
    if v.shape[0]:
        centre = (v.amax(0) + v.amin(0)) * 0.5
    else:
        centre = torch.zeros(3)
    if camera_info is not None:
        def vec(d):
            d = d or {}
            return torch.tensor([float(d.get("x", 0.0)), float(d.get("y", 0.0)), float(d.get("z", 0.0))])

        eye = vec(camera_info.get("position", {}))
        target = vec(camera_info["target"]) if camera_info.get("target") else centre
        fov_deg = float(camera_info.get("fov", 0) or 0) or 40.0
        zoom = float(camera_info.get("zoom", 1.0) or 1.0)
        fov = 2.0 * math.atan(math.tan(math.radians(fov_deg) * 0.5) / max(zoom, 1e-3))
    else:
        fov = math.radians(40.0)
        reach = float((v - centre).norm(dim=-1).amax().clamp_min(1e-6)) if v.shape[0] else 1e-6
        eye = centre + torch.tensor([0.0, 0.0, 1.0]) * (reach / math.tan(fov * 0.5) * 1.04)
        target = centre
    image, hit, depth = render_view(v, f, eye, target, fov, int(height), int(width), **options)
    if resolved == "depth":
        image = torch.zeros_like(image)
        if bool(hit.any()):
            near, far = float(depth[hit].min()), float(depth[hit].max())
            shade = ((far - depth) / max(far - near, 1e-6)).clamp(0.0, 1.0)
            image = torch.where(hit[..., None], shade[..., None].expand(-1, -1, 3), image)
    out = torch.where(hit[..., None], image.clamp(0.0, 1.0), torch.tensor(_hex_rgb(background)))
    return (out[None], hit.float()[None])
