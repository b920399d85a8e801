"""MoGe nodes (nodes/moge_nodes.py) and MESH / SaveGLB (nodes/mesh.py): loading from the
geometry_estimation folder, MOGE_GEOMETRY as ComfyUI's dict, the renders and the FOV against their
equations, meshing, the GLB read back by its container layout, and the panorama split and merge."""
from __future__ import annotations

import json
import math
import struct
import uuid
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch

from graph.context import NodeContext, reset_current, set_current
from nodes.environment import Environment
from nodes.errors import NodeInputError
from nodes.mesh import Mesh, save_glb
from nodes.moge_nodes import (_model_files, load_moge_model, moge_geometry_to_fov, moge_inference,
                              moge_panorama_inference, moge_point_map_to_mesh, moge_render)
from tests.fixtures.template_models_moge import WRITERS_MOGE


@contextmanager
def running(class_type: str, env: Environment):
    token = set_current(NodeContext(str(uuid.uuid4()), "1", "1", None, env, class_type=class_type))
    try:
        yield
    finally:
        reset_current(token)


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> Environment:
    root = tmp_path_factory.mktemp("moge")
    environment = Environment.rooted_at(root / "base")
    environment.ensure_dirs()
    folder = root / "base" / "models" / "geometry_estimation"
    folder.mkdir(parents=True)
    WRITERS_MOGE["moge_v1"](folder / "moge_1_vitl_fp16.safetensors")
    WRITERS_MOGE["moge_v2"](folder / "moge_2_vitl_normal_fp16.safetensors")
    WRITERS_MOGE["moge_v3"](folder / "moge_3_vitl_fp16.safetensors")
    return environment


def _load(env, name):
    with running("LoadMoGeModel", env):
        return load_moge_model(name)[0]


def test_loader_lists_the_folder_and_tells_versions(env):
    assert _model_files(env) == ["moge_1_vitl_fp16.safetensors", "moge_2_vitl_normal_fp16.safetensors",
                                 "moge_3_vitl_fp16.safetensors"]
    assert _load(env, "moge_1_vitl_fp16.safetensors").version == "v1"
    assert _load(env, "moge_2_vitl_normal_fp16.safetensors").version == "v2"
    assert _load(env, "moge_3_vitl_fp16.safetensors").version == "v3"
    with pytest.raises(NodeInputError, match="geometry_estimation"):
        _load(env, "missing.safetensors")


def test_inference_passes_refine_steps_to_moge3(env):
    model = _load(env, "moge_3_vitl_fp16.safetensors")
    image = torch.rand(1, 28, 28, 3, generator=torch.Generator().manual_seed(4))
    with running("MoGeInference", env):
        (none,) = moge_inference(model, image, 0, 0.0, 4, True, False, 0)
        (two,) = moge_inference(model, image, 0, 0.0, 4, True, False, 2)
    torch.testing.assert_close(two["points"], model.infer(image.movedim(-1, 1), resolution_level=0, apply_mask=False,
                                                          refine_steps=2)["points"])
    assert not torch.allclose(none["depth"], two["depth"])


def test_inference_gives_comfyuis_geometry_dict_in_chunks(env):
    model = _load(env, "moge_2_vitl_normal_fp16.safetensors")
    image = torch.rand(3, 28, 36, 4, generator=torch.Generator().manual_seed(0))  # RGBA: alpha dropped
    with running("MoGeInference", env):
        (geometry,) = moge_inference(model, image, 0, 0.0, 2, True, True, 3)
        (fixed,) = moge_inference(model, image[:1], 0, 60.0, 4, True, True, 3)
    assert set(geometry) == {"points", "depth", "intrinsics", "mask", "normal", "image"}
    assert geometry["points"].shape == (3, 28, 36, 3) and geometry["mask"].dtype == torch.bool
    assert torch.equal(geometry["image"], image[..., :3])
    whole = model.infer(image[..., :3].movedim(-1, 1), resolution_level=0)
    for name in ("points", "depth", "intrinsics", "mask", "normal"):
        torch.testing.assert_close(geometry[name], whole[name])
    aspect = 36 / 28
    diag = math.sqrt(1 + aspect ** 2)
    fx = aspect / diag / math.tan(math.radians(30)) / 2 * diag / aspect
    assert abs(float(fixed["intrinsics"][0, 0, 0]) - fx) < 1e-5  # fov_x 60 sets the focal: 0.5 / tan(30 deg)


def _disparity_reference(depth: np.ndarray) -> np.ndarray:
    valid = np.isfinite(depth) & (depth > 0)
    disparity = np.where(valid, 1 / np.where(valid, depth, 1), 0)
    lo, hi = np.quantile(disparity[valid], 0.001), np.quantile(disparity[valid], 0.999)
    return np.where(valid, np.clip((disparity - lo) / max(hi - lo, 1e-6), 0, 1), 0)


def _turbo_reference(x: np.ndarray) -> np.ndarray:
    r = np.polyval([59.28637943, -152.94239396, 132.13108234, -42.66032258, 4.61539260, 0.13572138], x)
    g = np.polyval([2.82956604, 4.27729857, -14.18503333, 4.84296658, 2.19418839, 0.09140261], x)
    b = np.polyval([27.34824973, -89.90310912, 110.36276771, -60.58204836, 12.64194608, 0.10667330], x)
    return np.clip(np.stack([r, g, b], axis=-1), 0, 1)


def test_render_modes_follow_their_equations(env):
    gen = torch.Generator().manual_seed(1)
    depth = 1 + 3 * torch.rand(2, 6, 7, generator=gen)
    depth[0, 0, 0] = float("inf")
    normal = torch.nn.functional.normalize(torch.randn(2, 6, 7, 3, generator=gen), dim=-1)
    mask = torch.rand(2, 6, 7, generator=gen) > 0.5
    geometry = {"depth": depth, "normal": normal, "mask": mask, "image": torch.zeros(2, 6, 7, 3)}
    with running("MoGeRender", env):
        grey, colour, gl, dx, shown = (moge_render(geometry, mode)[0] for mode in
                                       ("depth", "depth_colored", "normal_opengl", "normal_directx", "mask"))
    for i in range(2):
        want = _disparity_reference(depth[i].numpy())
        np.testing.assert_allclose(grey[i, ..., 0].numpy(), want, atol=1e-5)
        np.testing.assert_allclose(colour[i].numpy(), _turbo_reference(want), atol=1e-5)
    torch.testing.assert_close(gl, (normal * torch.tensor([1.0, -1.0, -1.0]) * 0.5 + 0.5).clamp(0, 1))
    torch.testing.assert_close(dx, (normal * torch.tensor([1.0, 1.0, -1.0]) * 0.5 + 0.5).clamp(0, 1))
    assert torch.equal(shown, mask.float()[..., None].expand(2, 6, 7, 3))
    assert grey.shape == (2, 6, 7, 3) and grey.dtype == torch.float32


def test_render_derives_normals_from_points_without_a_normal_head(env):
    """A plane z = 2 + 0.5 x facing the camera: every inner pixel's normal is (0.5, 0, -1) normalised,
    outward (towards the camera) in OpenCV's frame, so the DirectX map shows -(-1) = +1 in blue."""
    rows, cols = torch.meshgrid(torch.arange(5.0), torch.arange(6.0), indexing="ij")
    x, y = cols * 0.1, rows * 0.1
    points = torch.stack([x, y, 2 + 0.5 * x], dim=-1)[None]
    with running("MoGeRender", env):
        (image,) = moge_render({"points": points, "image": torch.zeros(1, 5, 6, 3)}, "normal_directx")
    n = torch.tensor([0.5, 0.0, -1.0]) / math.sqrt(1.25)
    want = (n * torch.tensor([1.0, 1.0, -1.0])) * 0.5 + 0.5
    torch.testing.assert_close(image[0, 1:-1, 1:-1], want.expand(3, 4, 3), atol=1e-5, rtol=0)


def test_geometry_to_fov(env):
    k = torch.tensor([[[0.9, 0, 0.5], [0, 1.2, 0.5], [0, 0, 1]]])
    geometry = {"intrinsics": k, "image": torch.zeros(1, 30, 40, 3)}
    with running("MoGeGeometryToFOV", env):
        vertical, focal = moge_geometry_to_fov(geometry, "vertical", "degrees")
        horizontal, _ = moge_geometry_to_fov(geometry, "horizontal", "radians")
        diagonal, _ = moge_geometry_to_fov(geometry, "diagonal", "degrees")
        with pytest.raises(NodeInputError, match="intrinsics"):
            moge_geometry_to_fov({"image": torch.zeros(1, 2, 2, 3)}, "vertical", "degrees")
    assert vertical == pytest.approx(math.degrees(2 * math.atan(0.5 / 1.2)))
    assert horizontal == pytest.approx(2 * math.atan(0.5 / 0.9))
    assert diagonal == pytest.approx(math.degrees(2 * math.atan(math.hypot(0.5 / 0.9, 0.5 / 1.2))))
    assert focal == pytest.approx(1.2 * 30)


def _grid_geometry(h=3, w=4, perspective=True):
    rows, cols = torch.meshgrid(torch.arange(float(h)), torch.arange(float(w)), indexing="ij")
    points = torch.stack([cols, rows, torch.full_like(cols, 5.0)], dim=-1)[None]
    geometry = {"points": points, "depth": points[..., 2], "image": torch.rand(1, h, w, 3),
                "mask": torch.ones(1, h, w, dtype=torch.bool)}
    if perspective:
        geometry["intrinsics"] = torch.eye(3)[None]
    return geometry


def test_point_map_to_mesh_triangulates_the_grid(env):
    geometry = _grid_geometry()
    with running("MoGePointMapToMesh", env):
        (mesh,) = moge_point_map_to_mesh(geometry, 0, 1, 0.04, True)
        (panorama,) = moge_point_map_to_mesh(_grid_geometry(perspective=False), 0, 1, 0.0, False)
        holed = dict(geometry, points=geometry["points"].clone())
        holed["points"][0, 1, 1] = float("inf")
        (holes,) = moge_point_map_to_mesh(holed, 0, 1, 0.0, True)
        with pytest.raises(NodeInputError, match="batch_index"):
            moge_point_map_to_mesh(geometry, 1, 1, 0.04, True)
        with pytest.raises(NodeInputError, match="empty mesh"):
            moge_point_map_to_mesh(dict(geometry, points=torch.full((1, 3, 4, 3), float("inf"))), 0, 1, 0.0, True)
    points = geometry["points"][0].reshape(-1, 3)
    assert mesh.vertices.shape == (1, 12, 3) and mesh.faces.shape == (1, 12, 3)
    torch.testing.assert_close(mesh.vertices[0], points * torch.tensor([1.0, -1.0, -1.0]))
    # quad (0, 0): a = 0, b = 1, c = 5, d = 4 -> (a, b, c), (a, c, d), each reversed for glTF's frame
    assert mesh.faces[0, 0].tolist() == [0, 5, 1] and mesh.faces[0, 6].tolist() == [0, 4, 5]
    torch.testing.assert_close(mesh.uvs[0, 5], torch.tensor([1 / 3, 0.5]))
    assert torch.equal(mesh.texture, geometry["image"])
    torch.testing.assert_close(panorama.vertices[0], points[:, [1, 2, 0]])
    assert panorama.texture is None and panorama.faces[0, 0].tolist() == [0, 1, 5]
    assert holes.vertices.shape[1] == 11 and holes.faces.shape[1] == 2 * 2  # 4 quads touch pixel (1, 1)


def test_discontinuities_and_decimation(env):
    geometry = _grid_geometry(6, 6)
    geometry["points"][0, :, 3:, 2] = 50.0  # a depth jump between columns 2 and 3
    geometry["depth"] = geometry["points"][..., 2]
    with running("MoGePointMapToMesh", env):
        (cut,) = moge_point_map_to_mesh(geometry, 0, 1, 0.04, False)
        (whole,) = moge_point_map_to_mesh(geometry, 0, 1, 0.0, False)
        (coarse,) = moge_point_map_to_mesh(geometry, 0, 2, 0.0, False)
    assert whole.vertices.shape[1] == 36 and cut.vertices.shape[1] == 24  # columns 2 and 3 dropped
    assert coarse.vertices.shape[1] == 9 and coarse.faces.shape[1] == 8


def _read_glb(path: Path) -> tuple[dict, bytes]:
    """The container by hand: 12-byte header, JSON chunk, BIN chunk (glTF 2.0 binary layout)."""
    data = path.read_bytes()
    magic, version, length = struct.unpack_from("<4sII", data, 0)
    assert magic == b"glTF" and version == 2 and length == len(data)
    json_length, json_type = struct.unpack_from("<II", data, 12)
    assert json_type == 0x4E4F534A and json_length % 4 == 0
    bin_length, bin_type = struct.unpack_from("<II", data, 20 + json_length)
    assert bin_type == 0x004E4942 and 28 + json_length + bin_length == len(data)
    return json.loads(data[20:20 + json_length]), data[28 + json_length:]


def _accessor(gltf: dict, blob: bytes, index: int) -> np.ndarray:
    accessor = gltf["accessors"][index]
    view = gltf["bufferViews"][accessor["bufferView"]]
    width = {"SCALAR": 1, "VEC2": 2, "VEC3": 3, "VEC4": 4}[accessor["type"]]
    dtype = {5126: np.float32, 5125: np.uint32}[accessor["componentType"]]
    start = view["byteOffset"] + accessor["byteOffset"]
    return np.frombuffer(blob, dtype=dtype, count=accessor["count"] * width, offset=start).reshape(-1, width)


def test_save_glb_writes_a_readable_textured_mesh(env):
    from PIL import Image
    import io

    geometry = _grid_geometry()
    with running("MoGePointMapToMesh", env):
        (mesh,) = moge_point_map_to_mesh(geometry, 0, 1, 0.0, True)
    with running("SaveGLB", env):
        result = save_glb(mesh, "3d/moge_test", prompt={"1": {"class_type": "SaveGLB"}}, extra_pnginfo=None)
    (entry,) = result["ui"]["3d"]
    assert entry["subfolder"] == "3d" and entry["filename"].endswith("_.glb") and entry["type"] == "output"
    gltf, blob = _read_glb(Path(env.output_dir) / "3d" / entry["filename"])
    primitive = gltf["meshes"][0]["primitives"][0]
    positions = _accessor(gltf, blob, primitive["attributes"]["POSITION"])
    np.testing.assert_array_equal(positions, mesh.vertices[0].numpy())
    assert gltf["accessors"][primitive["attributes"]["POSITION"]]["max"] == positions.max(axis=0).tolist()
    np.testing.assert_array_equal(_accessor(gltf, blob, primitive["indices"]).reshape(-1, 3), mesh.faces[0].numpy())
    np.testing.assert_allclose(_accessor(gltf, blob, primitive["attributes"]["TEXCOORD_0"]), mesh.uvs[0].numpy())
    view = gltf["bufferViews"][gltf["images"][0]["bufferView"]]
    texture = np.asarray(Image.open(io.BytesIO(blob[view["byteOffset"]:view["byteOffset"] + view["byteLength"]])))
    np.testing.assert_array_equal(texture, (geometry["image"][0].numpy() * 255).astype(np.uint8))
    material = gltf["materials"][primitive["material"]]
    assert material["pbrMetallicRoughness"]["baseColorTexture"] == {"index": 0, "texCoord": 0}
    assert json.loads(gltf["asset"]["extras"]["prompt"]) == {"1": {"class_type": "SaveGLB"}}
    with running("SaveGLB", env), pytest.raises(NodeInputError, match="MESH"):
        save_glb(geometry, "3d/x")
    bare = Mesh(vertices=mesh.vertices, faces=mesh.faces)
    with running("SaveGLB", env):
        (entry,) = save_glb(bare, "3d/bare")["ui"]["3d"]
    gltf, _ = _read_glb(Path(env.output_dir) / "3d" / entry["filename"])
    assert "images" not in gltf
    assert gltf["materials"][0]["pbrMetallicRoughness"]["baseColorFactor"] == [0.22, 0.22, 0.22, 1.0]


# -- panorama --------------------------------------------------------------------------------------

def test_panorama_cameras_look_at_the_icosahedron_and_uv_round_trips():
    from comfy_core.models import moge_panorama as pano

    extrinsics, intrinsics = pano.panorama_cameras()
    g = (1 + 5 ** 0.5) / 2
    assert extrinsics.shape == (12, 4, 4) and len(intrinsics) == 12
    np.testing.assert_allclose(extrinsics[0, 2, :3], np.array([0, 1, g]) / np.linalg.norm([0, 1, g]), atol=1e-6)
    for e in extrinsics:
        np.testing.assert_allclose(e[:3, :3] @ e[:3, :3].T, np.eye(3), atol=1e-5)
    np.testing.assert_allclose(intrinsics[0], [[0.5, 0, 0.5], [0, 0.5, 0.5], [0, 0, 1]], atol=1e-6)
    uv = pano.pixel_uv(8, 16)
    np.testing.assert_allclose(pano.directions_to_spherical_uv(pano.spherical_uv_to_directions(uv)), uv, atol=1e-5)


def test_panorama_merge_recovers_a_known_scene_up_to_scale():
    """Views of a scene whose distance along direction d is exp(0.3 d_x + 0.2 d_z): the merged log
    distance equals the scene's up to a constant (gradients fix it; the scale is free)."""
    from comfy_core.models import moge_panorama as pano

    extrinsics, intrinsics = pano.panorama_cameras()
    views, masks = [], []
    uv = pano.pixel_uv(48, 48)
    for e, k in zip(extrinsics, intrinsics):
        rays = pano._view_rays(uv, e, k)
        directions = rays / np.linalg.norm(rays, axis=-1, keepdims=True)
        views.append(np.exp(0.3 * directions[..., 0] + 0.2 * directions[..., 2]).astype(np.float32))
        masks.append(np.ones((48, 48), dtype=bool))
    calls = []
    merged, seen = pano.merge_panorama_depth(64, 32, views, masks, list(extrinsics), intrinsics,
                                             on_view=lambda: calls.append("view"),
                                             on_solve=lambda w, h: calls.append((w, h)))
    truth = pano.spherical_uv_to_directions(pano.pixel_uv(32, 64))
    log_truth = 0.3 * truth[..., 0] + 0.2 * truth[..., 2]
    offset = np.log(merged) - log_truth
    assert seen.all() and offset.std() < 0.02, offset.std()
    assert calls == ["view"] * 12 + [(64, 32)]


def test_panorama_inference_node(env):
    model = _load(env, "moge_2_vitl_normal_fp16.safetensors")
    image = torch.rand(1, 32, 64, 3, generator=torch.Generator().manual_seed(3))
    with running("MoGePanoramaInference", env):
        (geometry,) = moge_panorama_inference(model, image, 0, 256, 256, 12, 3)
        with pytest.raises(NodeInputError, match="one equirectangular image"):
            moge_panorama_inference(model, image.expand(2, -1, -1, -1), 0, 256, 256, 12, 3)
    assert set(geometry) == {"points", "depth", "mask", "image"}
    assert geometry["points"].shape == (1, 32, 64, 3) and geometry["depth"].shape == (1, 32, 64)
    torch.testing.assert_close(geometry["points"].norm(dim=-1), geometry["depth"], rtol=1e-5, atol=1e-5)
    with running("MoGePointMapToMesh", env):
        (mesh,) = moge_point_map_to_mesh(geometry, 0, 1, 0.04, True)
    assert mesh.vertices.shape[1] > 0
