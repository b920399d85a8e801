"""Hunyuan3D nodes (nodes/hunyuan3d_nodes.py): the empty latent, the single and multi-view
conditioning (the view embedding against its equation), and ImageOnlyCheckpointLoader ->
CLIPVisionEncode -> VAEDecodeHunyuan3D -> VoxelToMesh / VoxelToMeshBasic -> SaveGLB on the tiny
checkpoint, the GLB read back."""
from __future__ import annotations

import json
import math
import struct
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from graph.context import NodeContext, reset_current, set_current
from nodes.clip_vision import encode as clip_vision_encode
from nodes.environment import Environment
from nodes.errors import NodeInputError
from nodes.hunyuan3d_nodes import (Voxel, empty_latent_hunyuan3d, hunyuan3d_conditioning,
                                   hunyuan3d_conditioning_multiview, vae_decode_hunyuan3d, voxel_to_mesh,
                                   voxel_to_mesh_basic)
from nodes.mesh import save_glb
from nodes.video_model import image_only_checkpoint_loader
from tests.fixtures.template_models_hunyuan3d import WRITERS_HUNYUAN3D

CHECKPOINT = "hunyuan3d-dit-v2_fp16.safetensors"


@contextmanager
def running(class_type: str, env: Environment):
    token = set_current(NodeContext(str(uuid.uuid4()), "1", "1", None, env, class_type=class_type))
    try:
        yield
    finally:
        reset_current(token)


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> Environment:
    root = tmp_path_factory.mktemp("hy3d_nodes")
    environment = Environment.rooted_at(root / "base")
    environment.ensure_dirs()
    folder = root / "base" / "models" / "checkpoints"
    folder.mkdir(parents=True, exist_ok=True)
    WRITERS_HUNYUAN3D["checkpoint_hunyuan3d2"](folder / CHECKPOINT)
    return environment


class _Output:
    def __init__(self, tokens: torch.Tensor) -> None:
        self.last_hidden_state = tokens


def test_empty_latent_is_zero_shape_tokens():
    (latent,) = empty_latent_hunyuan3d(100, 2)
    assert latent["type"] == "hunyuan3dv2" and latent["samples"].shape == (2, 64, 100)
    assert not latent["samples"].any()


def test_conditioning_is_the_tokens_and_zeros():
    tokens = torch.randn(1, 5, 8)
    positive, negative = hunyuan3d_conditioning(_Output(tokens))
    assert positive[0][0] is tokens and positive[0][1] == {}
    assert torch.equal(negative[0][0], torch.zeros(1, 5, 8))
    with pytest.raises(NodeInputError):
        hunyuan3d_conditioning(object())


def test_multiview_adds_each_views_sin_cos_embedding_in_view_order():
    width = 8
    front, back = torch.randn(1, 3, width), torch.randn(1, 2, width)
    positive, negative = hunyuan3d_conditioning_multiview(front=_Output(front), back=_Output(back))
    expected = []
    for index, tokens in ((0, front), (2, back)):  # front is view 0, back view 2
        embedding = [math.sin(index / 10000 ** (k / (width / 2))) for k in range(width // 2)]
        embedding += [math.cos(index / 10000 ** (k / (width / 2))) for k in range(width // 2)]
        expected.append(tokens + torch.tensor(embedding))
    torch.testing.assert_close(positive[0][0], torch.cat(expected, dim=1))
    assert torch.equal(negative[0][0], torch.zeros(1, 5, width))
    with pytest.raises(NodeInputError, match="at least one view"):
        hunyuan3d_conditioning_multiview()


def _read_glb(path: Path) -> tuple[dict, bytes]:
    data = path.read_bytes()
    assert data[:4] == b"glTF"
    json_length = struct.unpack_from("<I", data, 12)[0]
    gltf = json.loads(data[20:20 + json_length])
    blob_length = struct.unpack_from("<I", data, 20 + json_length)[0]
    return gltf, data[28 + json_length:28 + json_length + blob_length]


def test_checkpoint_to_glb(env):
    with running("ImageOnlyCheckpointLoader", env):
        model, clip_vision, vae = image_only_checkpoint_loader(CHECKPOINT)
    assert model.model.family.name == "hunyuan3d2" and clip_vision.config.kind == "dinov2"
    with running("CLIPVisionEncode", env):
        (output,) = clip_vision_encode(clip_vision, torch.rand(1, 40, 60, 3), "center")
    assert output.last_hidden_state.shape == (1, 17, 32)
    positive, _ = hunyuan3d_conditioning(output)
    latent = {"samples": torch.randn(2, 64, 16)}
    with running("VAEDecodeHunyuan3D", env):
        (voxel,) = vae_decode_hunyuan3d(latent, vae, 1000, 16)
    assert voxel.data.shape == (2, 17, 17, 17) and 0 <= float(voxel.data.min()) <= float(voxel.data.max()) <= 1
    (mesh,) = voxel_to_mesh(voxel, "surface net", 0.6)
    (basic,) = voxel_to_mesh_basic(voxel, 0.6)
    assert mesh.vertices.shape[0] == 2 and basic.faces.shape[-1] == 3
    with running("SaveGLB", env):
        result = save_glb(mesh, "mesh/hy3d_test", prompt=None, extra_pnginfo=None)
    entries = result["ui"]["3d"]
    assert len(entries) == 2
    gltf, blob = _read_glb(Path(env.output_dir) / "mesh" / entries[0]["filename"])
    primitive = gltf["meshes"][0]["primitives"][0]
    item = mesh.item(0)
    positions = gltf["accessors"][primitive["attributes"]["POSITION"]]
    indices = gltf["accessors"][primitive["indices"]]
    assert positions["count"] == item["vertices"].shape[0] > 0
    assert indices["count"] == item["faces"].numel() > 0
    view = gltf["bufferViews"][indices["bufferView"]]
    faces = torch.tensor(struct.unpack_from(f"<{indices['count']}I", blob, view["byteOffset"])).view(-1, 3)
    assert torch.equal(faces, item["faces"])


def test_meshes_of_different_sizes_are_padded_with_counts():
    grids = torch.zeros(2, 4, 4, 4)
    grids[0, 1, 1, 1] = 1.0
    grids[1, 1:3, 1, 1] = 1.0
    (mesh,) = voxel_to_mesh_basic(Voxel(grids), 0.5)
    assert mesh.vertex_counts.tolist() == [24, 40] and mesh.face_counts.tolist() == [12, 20]
    assert mesh.item(0)["vertices"].shape == (24, 3) and mesh.item(1)["faces"].shape == (20, 3)


def test_voxel_inputs_are_checked(env):
    with pytest.raises(NodeInputError, match="VOXEL"):
        voxel_to_mesh(torch.zeros(4, 4, 4), "basic", 0.5)
    with pytest.raises(NodeInputError, match="algorithm"):
        voxel_to_mesh(Voxel(torch.zeros(1, 4, 4, 4)), "marching cubes", 0.5)
    with pytest.raises(NodeInputError, match="vae"):
        vae_decode_hunyuan3d({"samples": torch.zeros(1, 64, 8)}, object(), 1000, 16)
