"""Today's ComfyUI's mesh nodes (comfy_extras/nodes_mesh_postprocess.py, nodes_save_3d.py):
DecimateMesh, FillHoles, WeldVertices, MeshSmoothNormals, MeshToFile3D, RotateMesh, MergeMeshes
and GetMeshInfo, called as the executor calls them and run in workflows."""
from __future__ import annotations

import io
import struct

import pytest
import torch

from comfy_core.mesh.file3d import File3D
from comfy_core.mesh.topology import euler_characteristic, is_closed, signed_volume
from nodes.errors import NodeInputError
from nodes.mesh import Mesh, read_glb
from nodes.mesh_postprocess_nodes import (decimate_mesh, face_change_text, fill_holes, mesh_smooth_normals,
                                          weld_vertices)
from nodes.mesh_save3d_nodes import get_mesh_info, merge_meshes, mesh_to_file_3d, rotate_mesh
from tests.comfy_core.test_mesh_processing import icosphere
from tests.comfy_core.test_mesh_topology import cube, octahedron, soup
from tests.nodes.workflow_2026 import Runner, node


def as_mesh(v, f, **extra) -> Mesh:
    return Mesh(vertices=v[None], faces=f[None], **extra)


def midpoint() -> dict:
    return {"placement_mode": "midpoint"}


# -- called directly ---------------------------------------------------------------------------

def test_weld_vertices_node_repacks_with_counts():
    v, f = soup(*cube())
    colors = torch.rand(36, 3)
    (out,) = weld_vertices(as_mesh(v, f, vertex_colors=colors[None], uvs=torch.rand(1, 36, 2)), 1e-5, 0.0)
    assert out.vertices.shape == (1, 8, 3) and out.vertex_counts.tolist() == [8] and out.face_counts.tolist() == [12]
    assert out.vertex_colors.shape == (1, 8, 3) and out.uvs is None  # uvs no longer fit: dropped
    assert abs(float(out.vertex_colors.sum()) - float(colors.sum()) * 8 / 36) < 2.0  # averages of the copies
    (coarse,) = weld_vertices(as_mesh(v, f), 2.0, 0.0)  # cells of twice the diagonal: one vertex
    assert coarse.vertices.shape[1] == 1
    (fine,) = weld_vertices(as_mesh(v, f), 2.0, 1e-9)  # an absolute epsilon overrides
    assert fine.vertices.shape[1] == 8


def test_fill_holes_node_closes_an_open_cube_and_zero_disables():
    v, f = cube()
    mesh = as_mesh(v, f[2:])
    (out,) = fill_holes(mesh, 10.0, 1e-5, 16, False)
    item = out.item(0)
    assert is_closed(item["faces"], 8) and euler_characteristic(8, item["faces"]) == 2
    assert signed_volume(item["vertices"], item["faces"]) == pytest.approx(8.0)
    (untouched,) = fill_holes(mesh, 0.0, 1e-5, 16, False)
    assert untouched.faces.shape[1] == 10
    (small,) = fill_holes(mesh, 0.03, 1e-5, 16, False)  # ComfyUI's default perimeter: too small here
    assert small.faces.shape[1] == 10


def test_decimate_node_per_item_with_progress_text():
    v, f = icosphere(1)
    ov, of = octahedron()
    padded_f = torch.cat([of, torch.zeros(80 - 8, 3, dtype=of.dtype)])
    padded_v = torch.cat([ov, torch.zeros(v.shape[0] - 6, 3)])
    batch = Mesh(vertices=torch.stack([v, padded_v]), faces=torch.stack([f, padded_f]),
                 vertex_counts=torch.tensor([v.shape[0], 6]), face_counts=torch.tensor([80, 8]))
    (out,) = decimate_mesh(batch, 30, midpoint())
    assert out.face_counts[0] <= 30 and out.face_counts[1] == 8  # the small item passes through
    assert torch.equal(out.item(1)["faces"], of)
    (unchanged,) = decimate_mesh(batch, 0, {"placement_mode": "qem", "line_quadric_weight": 0.5,
                                            "feature_edge_quadric_weight": 0.0,
                                            "feature_edge_min_dihedral_deg": 30.0, "clamp_v_to_edge": True})
    assert unchanged.face_counts.tolist() == [80, 8]  # 0 disables
    assert face_change_text(1_230_000, 200_000) == "faces: 1.23M → 200K  (-84%)"
    assert face_change_text(320, 100) == "faces: 320 → 100  (-69%)"
    assert face_change_text(0, 0) == "faces: 0 → 0"


def test_smooth_normals_node_full_and_creased():
    v, f = octahedron()
    mesh = as_mesh(v, f, vertex_colors=torch.rand(1, 6, 3))
    (smooth,) = mesh_smooth_normals(mesh, 180.0)
    assert torch.allclose(smooth.normals[0], v, atol=1e-6) and smooth.vertex_colors is mesh.vertex_colors
    cv, cf = cube()
    colors = torch.rand(8, 3)
    (hard,) = mesh_smooth_normals(as_mesh(cv, cf, vertex_colors=colors[None]), 30.0)
    item = hard.item(0)
    assert item["vertices"].shape[0] == 24 and hard.vertex_counts.tolist() == [24]
    # every split copy keeps its source vertex's colour
    for row, position in zip(item["vertex_colors"], item["vertices"]):
        source = int(((cv - position).abs().sum(1) < 1e-6).nonzero()[0])
        assert torch.equal(row, colors[source])


def test_rotate_mesh_node():
    v, f = cube()
    mesh = as_mesh(v, f, normals=torch.nn.functional.normalize(v, dim=1)[None])
    (same,) = rotate_mesh(mesh, {"mode": "euler_xyz", "angle_x": 0.0, "angle_y": 0.0, "angle_z": 0.0})
    assert same is mesh
    (turned,) = rotate_mesh(mesh, {"mode": "euler_xyz", "angle_x": 0.0, "angle_y": 0.0, "angle_z": 90.0})
    want = torch.stack([-v[:, 1], v[:, 0], v[:, 2]], 1)  # (x, y) -> (-y, x)
    assert torch.allclose(turned.vertices[0], want, atol=1e-6)
    assert torch.allclose(turned.normals[0], torch.nn.functional.normalize(want, dim=1), atol=1e-6)
    half = 2 ** -0.5  # the same turn as a quaternion about z, not normalised
    (quat,) = rotate_mesh(mesh, {"mode": "quaternion", "qw": 3 * half, "qx": 0.0, "qy": 0.0, "qz": 3 * half})
    assert torch.allclose(quat.vertices, turned.vertices, atol=1e-6)
    with pytest.raises(ValueError, match="zero magnitude"):
        rotate_mesh(mesh, {"mode": "quaternion", "qw": 0.0, "qx": 0.0, "qy": 0.0, "qz": 0.0})


def test_merge_meshes_offsets_faces_and_fills_attributes():
    cv, cf = cube()
    ov, of = octahedron()
    texture = torch.rand(1, 4, 4, 3)
    first = as_mesh(cv, cf, uvs=torch.rand(1, 8, 2), texture=texture)
    second = as_mesh(ov, of, vertex_colors=torch.rand(1, 6, 4))
    (out,) = merge_meshes({"mesh0": first, "mesh1": second})
    assert out.vertices.shape == (1, 14, 3) and out.faces.shape == (1, 20, 3)
    assert torch.equal(out.faces[0, 12:], of + 8)
    assert torch.equal(out.uvs[0, 8:], torch.zeros(6, 2))  # the octahedron had no uvs
    assert torch.equal(out.vertex_colors[0, :8], torch.ones(8, 4))  # the cube had no colours: white
    assert out.texture is texture and out.vertex_counts is None
    with pytest.raises(NodeInputError, match="meshes.mesh1"):
        merge_meshes({"mesh0": first, "mesh1": "not a mesh"})


def test_get_mesh_info_text():
    v, f = cube()
    result = get_mesh_info(as_mesh(v, f, uvs=torch.rand(1, 8, 2), texture=torch.rand(1, 16, 32, 3)))
    info = result["result"][1]
    assert info == "Vertices:   8\nFaces:      12\nAttributes: uvs, texture 16×32"
    assert result["ui"] == {"text": [info]}
    big = Mesh(vertices=torch.zeros(2, 12_345, 3), faces=torch.zeros(2, 1_500_000, 3, dtype=torch.long),
               vertex_counts=torch.tensor([12_345, 10]), face_counts=torch.tensor([1_500_000, 20]))
    text = get_mesh_info(big)["result"][1]
    assert text.splitlines() == ["Batch:      2 meshes", "Vertices:   12,355 (12.4K) total",
                                 "Faces:      1,500,020 (1.50M) total",
                                 "  [0]      12,345 verts  ·   1,500,000 faces",
                                 "  [1]          10 verts  ·          20 faces",
                                 "Attributes: none"]


def test_mesh_to_file_3d_is_a_glb():
    v, f = cube()
    (model,) = mesh_to_file_3d(Mesh(vertices=torch.stack([v, v * 2]), faces=torch.stack([f, f]),
                                    vertex_colors=torch.rand(2, 8, 3)))
    assert isinstance(model, File3D) and model.format == "glb" and not model.is_disk_backed
    document, binary = read_glb(model.get_bytes())
    primitive = document["meshes"][0]["primitives"][0]
    assert set(primitive["attributes"]) == {"POSITION", "COLOR_0"}
    position = document["accessors"][primitive["attributes"]["POSITION"]]
    assert position["count"] == 8 and position["max"] == [1.0, 1.0, 1.0]  # the first item only
    view = document["bufferViews"][document["accessors"][primitive["indices"]]["bufferView"]]
    indices = struct.unpack(f"<{36}I", binary[view["byteOffset"]:view["byteOffset"] + view["byteLength"]])
    assert list(indices) == f.reshape(-1).tolist()
    with pytest.raises(ValueError, match="mesh is empty"):
        mesh_to_file_3d(Mesh(vertices=torch.zeros(1, 0, 3), faces=torch.zeros(1, 0, 3, dtype=torch.long)))
    with pytest.raises(NodeInputError, match="'mesh'"):
        mesh_to_file_3d(torch.zeros(1, 3, 3))


# -- in a workflow ------------------------------------------------------------------------------

class OpenCubeSoup:
    """A test source: a side-2 cube with its -z side missing, every face with its own vertices."""

    RETURN_TYPES = ("MESH",)
    FUNCTION = "make"
    CATEGORY = "testing"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {}}

    def make(self):
        v, f = cube()
        sv, sf = soup(v, f[2:])
        return (Mesh(vertices=sv[None], faces=sf[None]),)


def _texts(events) -> list[tuple[str, str]]:
    out = []
    for event in events:
        if event.type == 3:
            (length,) = struct.unpack(">I", event.data[:4])
            out.append((event.data[4:4 + length].decode(), event.data[4 + length:].decode()))
    return out


async def test_mesh_nodes_in_a_workflow(tmp_path):
    runner = Runner(tmp_path)
    runner.registry.add_v1("OpenCubeSoup", OpenCubeSoup)
    prompt = {
        "src": node("OpenCubeSoup"),
        "weld": node("WeldVertices", mesh=["src", 0], epsilon_rel=1e-5, epsilon_abs=0.0),
        "fill": node("FillHoles", mesh=["weld", 0], max_perimeter=10.0, weld_epsilon_rel=1e-5, max_vertices=16,
                     fill_chains=False),
        "dec": node("DecimateMesh", mesh=["fill", 0], target_face_count=200000, **{"placement_mode": "qem",
                    "placement_mode.line_quadric_weight": 0.0, "placement_mode.feature_edge_quadric_weight": 0.0,
                    "placement_mode.feature_edge_min_dihedral_deg": 30.0, "placement_mode.clamp_v_to_edge": True}),
        "rot": node("RotateMesh", mesh=["dec", 0], **{"mode": "euler_xyz", "mode.angle_x": 0.0,
                                                       "mode.angle_y": 0.0, "mode.angle_z": 90.0}),
        "merge": node("MergeMeshes", **{"meshes.mesh0": ["rot", 0], "meshes.mesh1": ["src", 0]}),
        "normals": node("MeshSmoothNormals", mesh=["merge", 0], crease_angle=30.0),
        "info": node("GetMeshInfo", mesh=["normals", 0]),
        "file": node("MeshToFile3D", mesh=["info", 0]),
        "save": node("SaveGLB", mesh=["info", 0], filename_prefix="3d/merged"),
        "text": node("PreviewAny", source=["info", 1]),
        "render": node("RenderMesh", mesh=["info", 0], mode="normal", width=64, height=64, background="#ffffff"),
        "view": node("PreviewImage", images=["render", 0]),
    }
    checked = await runner.validate(prompt)
    assert checked.ok, checked.node_errors
    events = []
    out = await runner.executor.execute(prompt, "p", outputs=checked.outputs, sink=events.append)
    assert out.status == "success", out.error
    # welded (8) + filled (closed, 12 faces) + the 30-face soup: split along creases, 24 + 30 vertices
    info = "Vertices:   54\nFaces:      22\nAttributes: normals"
    assert out.ui_outputs["text"] == {"text": [info]}
    assert out.ui_outputs["info"] == {"text": [info]}
    assert ("info", info) in _texts(events)
    assert ("dec", "faces: 12 → 12  (+0%)") in _texts(events)
    saved = out.ui_outputs["save"]["3d"]
    assert len(saved) == 1 and (tmp_path / "output" / "3d" / saved[0]["filename"]).is_file()
    assert len(out.ui_outputs["view"]["images"]) == 1


# -- MeshTextureToImage, RenderMesh --------------------------------------------------------------

def test_mesh_texture_to_image_gives_neutral_maps():
    from nodes.mesh_postprocess_nodes import mesh_texture_to_image

    v, f = cube()
    texture = torch.rand(1, 4, 6, 3) * 1.5  # out of range values are clamped
    base, metallic, roughness, occlusion, normal = mesh_texture_to_image(as_mesh(v, f, texture=texture))
    assert torch.equal(base, texture.clamp(0, 1))
    assert torch.equal(metallic, torch.zeros(1, 4, 6, 3)) and torch.equal(roughness, torch.zeros(1, 4, 6, 3))
    assert torch.equal(occlusion, torch.ones(1, 4, 6, 3))
    assert torch.equal(normal, torch.tensor([0.5, 0.5, 1.0]).expand(1, 4, 6, 3))
    with pytest.raises(ValueError, match="no baseColor texture"):
        mesh_texture_to_image(as_mesh(v, f))


CAMERA = {"position": {"x": 0.0, "y": 0.0, "z": 5.0}, "target": {"x": 0.0, "y": 0.0, "z": 0.0}, "fov": 40}


def _covered(half_size: float, distance: float, pixels: int, fov_deg: float = 40.0) -> int:
    """Pixel centres inside a centred square of the given half size at the given distance."""
    import math

    half = half_size / (distance * math.tan(math.radians(fov_deg) / 2)) * pixels / 2
    return sum(1 for j in range(pixels) if abs(j + 0.5 - pixels / 2) < half) ** 2


def test_render_mesh_silhouette_matches_the_projection():
    from nodes.mesh_postprocess_nodes import render_mesh

    v, f = cube()
    image, mask = render_mesh(as_mesh(v, f), "solid", 64, 64, "#ff0000", camera_info=CAMERA)
    assert image.shape == (1, 64, 64, 3) and mask.shape == (1, 64, 64)
    assert int(mask.sum()) == _covered(1.0, 4.0, 64) == 44 * 44  # the front face, 4 units away
    assert torch.equal(image[0, 0, 0], torch.tensor([1.0, 0.0, 0.0]))  # background
    assert torch.allclose(image[0, 32, 32], torch.tensor([0.72, 0.72, 0.72]), atol=1e-3)  # clay, facing us
    small = {"position": {"x": 0, "y": 0, "z": 0}, "quaternion": {"x": 0, "y": 0, "z": 0, "w": 1},
             "scale": {"x": 0.5, "y": 0.5, "z": 0.5}}
    _, scaled = render_mesh(as_mesh(v, f), "solid", 64, 64, "#000000", model_3d_info=[small], camera_info=CAMERA)
    assert int(scaled.sum()) == _covered(0.5, 4.5, 64)
    _, framed = render_mesh(as_mesh(v, f), "auto", 64, 64)  # default front view frames the bounding sphere
    import math
    distance = math.sqrt(3) / math.tan(math.radians(20)) * 1.04
    assert int(framed.sum()) == _covered(1.0, distance - 1.0, 64)


def _quad(**extra) -> Mesh:
    v = torch.tensor([[-1.0, -1, 0], [1, -1, 0], [1, 1, 0], [-1, 1, 0]])
    f = torch.tensor([[0, 1, 2], [0, 2, 3]])
    return as_mesh(v, f, **extra)


def test_render_mesh_modes():
    from nodes.mesh_postprocess_nodes import render_mesh

    near = {"position": {"x": 0.0, "y": 0.0, "z": 1.0}, "target": {"x": 0.0, "y": 0.0, "z": 0.0}, "fov": 120}
    uvs = torch.tensor([[0.0, 1.0], [1.0, 1.0], [1.0, 0.0], [0.0, 0.0]])  # v = 0 at the top row of the texture
    texture = torch.tensor([[[1.0, 0, 0], [0, 1, 0]], [[0, 0, 1], [1, 1, 0]]])[None]
    image, mask = render_mesh(_quad(uvs=uvs[None], texture=texture), "auto", 64, 64, "#000000", camera_info=near)
    assert int(mask.sum()) == _covered(1.0, 1.0, 64, 120.0)
    centre = lambda u, w: image[0, int(w * 64), int(u * 64)]  # noqa: E731
    # texel centres: u, v in (0.25, 0.75) of a 2 x 2 texture; the view spans [-1.73, 1.73] at the quad
    s = 1 / (1.0 * 3 ** 0.5)  # screen fraction per unit
    at = lambda x: 0.5 + x * s / 2  # noqa: E731
    assert torch.allclose(centre(at(-0.5), at(-0.5)), torch.tensor([1.0, 0, 0]), atol=0.05)
    assert torch.allclose(centre(at(0.5), at(-0.5)), torch.tensor([0.0, 1, 0]), atol=0.05)
    assert torch.allclose(centre(at(-0.5), at(0.5)), torch.tensor([0.0, 0, 1]), atol=0.05)
    colors = torch.full((1, 4, 3), 0.25)
    shaded, _ = render_mesh(_quad(vertex_colors=colors), "vertex colors", 64, 64, "#000000", camera_info=near)
    assert torch.allclose(shaded[0][mask[0] > 0], torch.tensor(0.25 ** (1 / 2.2)))
    normals = torch.tensor([0.0, 0.0, 1.0]).expand(1, 4, 3)
    encoded, _ = render_mesh(_quad(normals=normals), "normal", 64, 64, "#000000", camera_info=near)
    assert torch.allclose(encoded[0][mask[0] > 0], torch.tensor([0.5, 0.5, 1.0]), atol=1e-5)
    depth, _ = render_mesh(_quad(), "depth", 64, 64, "#000000", camera_info=near)
    assert torch.allclose(depth[0, 31:33, 31:33], torch.ones(2, 2, 3), atol=0.02)  # nearest: white
    assert float(depth[0, 0, 0, 0]) < 0.05  # the corners are farthest: black
    with pytest.raises(NodeInputError, match="'mode'"):
        render_mesh(_quad(), "wireframe", 64, 64)


# -- RemeshMesh ------------------------------------------------------------------------------------

def _sdf(qef: bool = True) -> dict:
    return {"sign_mode": "sdf", "qef": qef, "manifold": False}


def test_remesh_node_in_the_unit_domain():
    from nodes.mesh_postprocess_nodes import remesh_mesh

    v, f = cube(0.5)
    (out,) = remesh_mesh(as_mesh(v, f, vertex_colors=torch.ones(1, 8, 3)), 32, _sdf(), 1.0, 0.0, False, 0, 0.01,
                         20_000_000)
    item = out.item(0)
    assert item["faces"].dtype == torch.int32 and out.face_counts[0] > 12
    assert is_closed(item["faces"].long(), item["vertices"].shape[0])
    assert signed_volume(item["vertices"], item["faces"].long()) == pytest.approx(0.125, rel=1e-3)
    assert torch.allclose(item["vertex_colors"], torch.ones_like(item["vertex_colors"]))
    with pytest.raises(NodeInputError, match="sign_mode"):
        remesh_mesh(as_mesh(v, f), 32, {"sign_mode": "solid", "fill": 20.0, "qef": False}, 1.0, 0.0, False, 0,
                    0.01, 20_000_000)


class SmallCube:
    RETURN_TYPES = ("MESH",)
    FUNCTION = "make"
    CATEGORY = "testing"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {}}

    def make(self):
        v, f = cube(0.5)
        return (Mesh(vertices=v[None], faces=f[None]),)


async def test_remesh_then_decimate_in_a_workflow(tmp_path):
    runner = Runner(tmp_path)
    runner.registry.add_v1("SmallCube", SmallCube)
    prompt = {
        "src": node("SmallCube"),
        "remesh": node("RemeshMesh", mesh=["src", 0], resolution=32, band=1.0, project_back=0.0, fix_poles=False,
                       smooth_iters=0, drop_small_components=0.01, precluster_max_verts=20000000,
                       **{"sign_mode": "sdf", "sign_mode.qef": True, "sign_mode.manifold": False}),
        "dec": node("DecimateMesh", mesh=["remesh", 0], target_face_count=200, placement_mode="midpoint"),
        "info": node("GetMeshInfo", mesh=["dec", 0]),
        "text": node("PreviewAny", source=["info", 1]),
    }
    checked = await runner.validate(prompt)
    assert checked.ok, checked.node_errors
    events = []
    out = await runner.executor.execute(prompt, "p", outputs=checked.outputs, sink=events.append)
    assert out.status == "success", out.error
    texts = dict(_texts(events))
    assert texts["remesh"].startswith("faces: 12 → ") and texts["remesh"].endswith("%)")
    remeshed = int(texts["remesh"].split("→ ")[1].split()[0].replace("K", "00").replace(".", ""))
    assert remeshed > 200
    faces = int(out.ui_outputs["text"]["text"][0].splitlines()[1].split()[1])
    assert 150 <= faces <= 200 and texts["dec"].endswith(f" → {faces}  (" + texts["dec"].split("(")[1])


# -- Get3DComponents -------------------------------------------------------------------------------

def test_get_3d_components_reads_back_mesh_to_file_3d(tmp_path):
    from io import BytesIO

    from nodes.mesh_io_nodes import get_3d_components

    v, f = cube()
    mesh = as_mesh(v, f, uvs=torch.rand(1, 8, 2), vertex_colors=torch.rand(1, 8, 3),
                   normals=torch.nn.functional.normalize(v, dim=1)[None], texture=torch.rand(1, 4, 5, 3))
    (back,) = get_3d_components(mesh_to_file_3d(mesh)[0])
    assert torch.equal(back.vertices, mesh.vertices) and torch.equal(back.faces, mesh.faces)
    for name in ("uvs", "vertex_colors", "normals"):
        assert torch.allclose(getattr(back, name), getattr(mesh, name), atol=1e-6)
    assert back.texture.shape == (1, 4, 5, 3)
    assert float((back.texture - mesh.texture).abs().max()) <= 1 / 255 + 1e-6  # an 8-bit PNG (truncated)
    obj = tmp_path / "tri.obj"
    obj.write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n")
    (tri,) = get_3d_components(File3D(str(obj)))
    assert tri.faces.tolist() == [[[0, 1, 2]]] and tri.uvs is None
    (sniffed,) = get_3d_components(File3D(BytesIO(mesh_to_file_3d(mesh)[0].get_bytes())))  # no format: sniffed
    assert sniffed.vertices.shape == (1, 8, 3)
    with pytest.raises(ValueError, match="fbx parsing is not supported"):
        get_3d_components(File3D(BytesIO(b"x"), file_format="fbx"))
    with pytest.raises(ValueError, match="unsupported or unrecognized"):
        get_3d_components(File3D(BytesIO(b"????")))
    with pytest.raises(NodeInputError, match="'model_3d'"):
        get_3d_components(mesh)


async def test_mesh_file_round_trip_in_a_workflow(tmp_path):
    runner = Runner(tmp_path)
    runner.registry.add_v1("SmallCube", SmallCube)
    prompt = {"src": node("SmallCube"),
              "file": node("MeshToFile3D", mesh=["src", 0]),
              "back": node("Get3DComponents", model_3d=["file", 0]),
              "info": node("GetMeshInfo", mesh=["back", 0]),
              "text": node("PreviewAny", source=["info", 1])}
    checked = await runner.validate(prompt)
    assert checked.ok, checked.node_errors
    out = await runner.executor.execute(prompt, "p", outputs=checked.outputs)
    assert out.status == "success", out.error
    assert out.ui_outputs["text"] == {"text": ["Vertices:   8\nFaces:      12\nAttributes: none"]}



def test_save_glb_writes_a_3d_file_unchanged_under_its_own_format(tmp_path):
    """SaveGLB takes MeshToFile3D's File3D (ComfyUI's MultiType input) and writes its bytes as they are."""
    from nodes.environment import Environment
    from nodes.mesh import save_glb
    from tests.nodes.node_context import running_node

    env = Environment.rooted_at(tmp_path)
    env.ensure_dirs()
    v, f = cube()
    (model,) = mesh_to_file_3d(Mesh(vertices=v[None], faces=f[None]))
    with running_node("SaveGLB", env=env):
        saved = save_glb(model, "3d/file")["ui"]["3d"]
        obj = save_glb(File3D(io.BytesIO(b"o cube\n"), "OBJ"), "3d/file")["ui"]["3d"]
    assert [s["filename"] for s in saved] == ["file_00001_.glb"] and [s["filename"] for s in obj] == ["file_00002_.obj"]
    assert (tmp_path / "output" / "3d" / "file_00001_.glb").read_bytes() == model.get_bytes()
    assert (tmp_path / "output" / "3d" / "file_00002_.obj").read_bytes() == b"o cube\n"
