"""comfy_core/mesh/fileio.py: glTF (node transforms, strips, mirrored winding, strided and sparse
accessors, normalised colours, data URIs, external files), OBJ and STL read into meshes, checked
against the geometry written by hand."""
from __future__ import annotations

import base64
import json
import struct

import numpy as np
import pytest

from comfy_core.mesh import fileio

TRI = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0]], np.float32)


def gltf_bytes(nodes, meshes, blobs, accessors, views, extra=None, glb=True, scenes=None):
    body = b"".join(blobs)
    doc = {"asset": {"version": "2.0"}, "buffers": [{"byteLength": len(body)}], "bufferViews": views,
           "accessors": accessors, "meshes": meshes, "nodes": nodes,
           "scenes": scenes if scenes is not None else [{"nodes": [0]}], "scene": 0, **(extra or {})}
    if not glb:
        doc["buffers"][0]["uri"] = "data:application/octet-stream;base64," + base64.b64encode(body).decode()
        return json.dumps(doc).encode()
    text = json.dumps(doc).encode()
    text += b" " * (-len(text) % 4)
    body += b"\0" * (-len(body) % 4)
    return (struct.pack("<4sII", b"glTF", 2, 28 + len(text) + len(body)) + struct.pack("<II", len(text), 0x4E4F534A)
            + text + struct.pack("<II", len(body), 0x004E4942) + body)


def one_triangle(node: dict, glb: bool = True, mode: int = 4, positions=TRI, indices=None):
    blobs = [positions.tobytes()]
    views = [{"buffer": 0, "byteOffset": 0, "byteLength": positions.nbytes}]
    accessors = [{"bufferView": 0, "componentType": 5126, "count": len(positions), "type": "VEC3"}]
    prim = {"attributes": {"POSITION": 0}, "mode": mode}
    if indices is not None:
        ind = np.asarray(indices, np.uint16)
        blobs.append(ind.tobytes() + b"\0" * (-ind.nbytes % 4))
        views.append({"buffer": 0, "byteOffset": positions.nbytes, "byteLength": ind.nbytes})
        accessors.append({"bufferView": 1, "componentType": 5123, "count": len(ind), "type": "SCALAR"})
        prim["indices"] = 1
    return gltf_bytes([{"mesh": 0, **node}], [{"primitives": [prim]}], blobs, accessors, views, glb=glb)


def test_node_transforms_apply_in_world_space():
    prims, _ = fileio.read_gltf(one_triangle({"translation": [1, 2, 3], "scale": [2, 2, 2]}))
    assert np.allclose(prims[0]["positions"], TRI * 2 + [1, 2, 3])
    quarter = [0, 0, np.sin(np.pi / 4), np.cos(np.pi / 4)]  # 90 degrees about z: x -> y
    prims, _ = fileio.read_gltf(one_triangle({"rotation": quarter}))
    assert np.allclose(prims[0]["positions"], [[0, 0, 0], [0, 1, 0], [-1, 0, 0]], atol=1e-6)
    matrix = np.eye(4)
    matrix[3, :3] = [5, 0, 0]  # column-major: the translation is the last 4 numbers
    prims, _ = fileio.read_gltf(one_triangle({"matrix": matrix.reshape(-1).tolist()}))
    assert np.allclose(prims[0]["positions"], TRI + [5, 0, 0])


def test_a_mirroring_transform_reverses_the_winding_and_children_compose():
    prims, _ = fileio.read_gltf(one_triangle({"scale": [-1, 1, 1]}))
    assert prims[0]["faces"].tolist() == [[2, 1, 0]]
    blob = TRI.tobytes()
    data = gltf_bytes([{"translation": [0, 0, 1], "children": [1]}, {"mesh": 0, "translation": [1, 0, 0]}],
                      [{"primitives": [{"attributes": {"POSITION": 0}}]}], [blob],
                      [{"bufferView": 0, "componentType": 5126, "count": 3, "type": "VEC3"}],
                      [{"buffer": 0, "byteLength": len(blob)}])
    prims, _ = fileio.read_gltf(data)
    assert np.allclose(prims[0]["positions"], TRI + [1, 0, 1])


def test_strips_fans_and_indices():
    square = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0]], np.float32)
    strip = fileio.read_gltf(one_triangle({}, mode=5, positions=square))[0][0]["faces"]
    assert strip.tolist() == [[0, 1, 2], [3, 2, 1]]  # every other triangle turned to keep the winding
    fan = fileio.read_gltf(one_triangle({}, mode=6, positions=square, indices=[0, 1, 3, 2]))[0][0]["faces"]
    assert fan.tolist() == [[0, 1, 3], [0, 3, 2]]
    assert fileio.read_gltf(one_triangle({}, mode=1))[0] == []  # lines are skipped


def test_json_gltf_with_a_data_uri_and_external_file_rules(tmp_path):
    data = one_triangle({}, glb=False)
    assert np.allclose(fileio.read_gltf(data)[0][0]["positions"], TRI)
    doc = json.loads(data)
    (tmp_path / "tri.bin").write_bytes(TRI.tobytes())
    doc["buffers"][0]["uri"] = "tri.bin"
    assert np.allclose(fileio.read_gltf(json.dumps(doc).encode(), str(tmp_path))[0][0]["positions"], TRI)
    with pytest.raises(ValueError, match="in-memory stream"):
        fileio.read_gltf(json.dumps(doc).encode(), None)
    doc["buffers"][0]["uri"] = "../outside.bin"
    with pytest.raises(ValueError, match="outside the model directory"):
        fileio.read_gltf(json.dumps(doc).encode(), str(tmp_path))
    doc["extensionsRequired"] = ["KHR_draco_mesh_compression"]
    doc["buffers"][0]["uri"] = "tri.bin"
    with pytest.raises(ValueError, match="does not support"):
        fileio.read_gltf(json.dumps(doc).encode(), str(tmp_path))


def test_strided_sparse_and_normalised_accessors():
    # interleaved position (3 floats) + colour (4 unsigned bytes, normalised) = 16-byte stride
    rows = b"".join(p.tobytes() + bytes([255, 0, 128, 255]) for p in TRI)
    sparse_idx = np.array([2], np.uint16).tobytes() + b"\0\0"
    sparse_val = np.array([[0, 5, 0]], np.float32).tobytes()
    blobs = [rows, sparse_idx, sparse_val]
    views = [{"buffer": 0, "byteOffset": 0, "byteLength": 48, "byteStride": 16},
             {"buffer": 0, "byteOffset": 48, "byteLength": 2}, {"buffer": 0, "byteOffset": 52, "byteLength": 12}]
    accessors = [{"bufferView": 0, "componentType": 5126, "count": 3, "type": "VEC3",
                  "sparse": {"count": 1, "indices": {"bufferView": 1, "componentType": 5123},
                             "values": {"bufferView": 2}}},
                 {"bufferView": 0, "byteOffset": 12, "componentType": 5121, "normalized": True, "count": 3,
                  "type": "VEC4"}]
    data = gltf_bytes([{"mesh": 0}], [{"primitives": [{"attributes": {"POSITION": 0, "COLOR_0": 1}}]}], blobs,
                      accessors, views)
    prim = fileio.read_gltf(data)[0][0]
    assert np.allclose(prim["positions"], [[0, 0, 0], [1, 0, 0], [0, 5, 0]])
    assert np.allclose(prim["colors"], [[1, 0, 128 / 255, 1]] * 3)


def test_obj_corners_polygons_colours_and_uvs():
    text = b"""# a quad and a triangle
v 0 0 0 1 0 0
v 1 0 0 1 0 0
v 1 1 0 1 0 0
v 0 1 0 1 0 0
vt 0 0
vt 1 0
vt 1 1
vt 0 1
vn 0 0 1
f 1/1/1 2/2/1 3/3/1 4/4/1
f -4/1/1 -2/3/1 -1/4/1
"""
    prim = fileio.read_obj(text)
    assert prim["faces"].tolist() == [[0, 1, 2], [0, 2, 3], [0, 2, 3]]
    assert prim["positions"].shape == (4, 3)  # the same v/vt/vn corners are shared
    assert np.allclose(prim["uvs"], [[0, 1], [1, 1], [1, 0], [0, 0]])  # v flipped
    assert np.allclose(prim["colors"], [[1, 0, 0]] * 4)  # sRGB 1 and 0 are linear 1 and 0
    assert np.allclose(prim["normals"], [[0, 0, 1]] * 4)
    half = fileio.read_obj(b"v 0 0 0 0.5 0.5 0.5\nv 1 0 0\nv 0 1 0\nf 1 2 3\n")
    assert np.allclose(half["colors"][0], ((0.5 + 0.055) / 1.055) ** 2.4) and half["normals"] is None
    with pytest.raises(ValueError, match="out of range"):
        fileio.read_obj(b"v 0 0 0\nf 1 2 3\n")
    with pytest.raises(ValueError, match="no faces"):
        fileio.read_obj(b"v 0 0 0\n")


def test_stl_binary_with_colours_and_ascii():
    header = b"COLOR=" + bytes([255, 255, 255, 255])
    header += b"\0" * (80 - len(header))
    red = 31 | 0  # 5-bit red, "own colour" (bit 15 clear)
    facet = struct.pack("<3f9fH", 0, 0, 2, *TRI.reshape(-1), red)
    prim = fileio.read_stl(header + struct.pack("<I", 1) + facet)
    assert np.allclose(prim["positions"], TRI) and prim["faces"].tolist() == [[0, 1, 2]]
    assert np.allclose(prim["normals"], [[0, 0, 1]] * 3)  # unit
    assert np.allclose(prim["colors"], [[1, 0, 0]] * 3)
    ascii_stl = b"""solid t
facet normal 0 0 1
 outer loop
  vertex 0 0 0
  vertex 1 0 0
  vertex 0 1 0
 endloop
endfacet
endsolid t
"""
    prim = fileio.read_stl(ascii_stl)
    assert np.allclose(prim["positions"], TRI) and prim["colors"] is None
    assert fileio.sniff_format(ascii_stl) == "stl" and fileio.sniff_format(b'  {"asset"') == "gltf"
    with pytest.raises(ValueError, match="not a valid STL"):
        fileio.read_stl(b"nonsense")


def test_merge_fills_missing_attributes():
    a = {"positions": TRI, "faces": np.array([[0, 1, 2]]), "uvs": np.zeros((3, 2), np.float32), "colors": None,
         "normals": np.tile([[0, 0, 1]], (3, 1)).astype(np.float32)}
    b = {"positions": TRI + 1, "faces": np.array([[0, 1, 2]]), "uvs": None,
         "colors": np.full((3, 4), 0.5, np.float32), "normals": None}
    merged = fileio.merge_primitives([a, b])
    assert merged["faces"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert np.allclose(merged["colors"][:3], 1.0) and merged["normals"] is None and merged["uvs"].shape == (6, 2)
