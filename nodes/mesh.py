"""The MESH wire type and SaveGLB, as today's ComfyUI has them (`comfy_api` `Types.MESH`; SaveGLB, "Save
3D Model", whose GLB writer is ComfyUI's dependency-free one); written here.

MESH: `vertices` [B, N, 3], `faces` [B, M, 3] (int), optional per-vertex `uvs` [B, N, 2],
`vertex_colors` [B, N, 3|4], `normals` [B, N, 3], a `texture` [B, H, W, 3] in 0..1, and
`vertex_counts` / `face_counts` [B] when the items of a batch differ in size (rows padded).

GLB (glTF 2.0 binary, https://registry.khronos.org/glTF/specs/2.0/glTF-2.0.html#binary-gltf-layout):
a 12-byte header (`glTF`, version 2, length), a JSON chunk (space-padded to 4 bytes), a BIN chunk
(zero-padded); one mesh with one triangle primitive: POSITION (float32 VEC3 with min / max), indices
(uint32), TEXCOORD_0, COLOR_0, NORMAL when present; a texture is embedded as PNG (linear filtering,
clamped) and used as the base colour when there are UVs. The material is ComfyUI's: double-sided,
metallic 0, roughness 0.5 over a 0.22 grey, or roughness 1 over white when the mesh carries a texture
or colours. SaveGLB writes each batch item to `<prefix>_<counter:05>_.glb` in the output folder with
the prompt / workflow as `asset.extras` (unless metadata is disabled), and reports them under "3d";
a 3-D file input (File3D, comfy_core/mesh/file3d.py) is written unchanged as `<prefix>_<counter:05>_.<format>`.
"""
from __future__ import annotations

import io
import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graph.v3_schema import Socket, String, v3_node
from nodes.environment import current_env
from nodes.errors import NodeInputError, describe, image_input_errors

if TYPE_CHECKING:
    import torch

MESH = "MESH"
# SaveGLB's input accepts a MESH or any of ComfyUI's 3-D file types (V3 MultiType, in its order).
FILE_3D_KINDS = ("GLB", "GLTF", "OBJ", "FBX", "STL", "USDZ", "PLY", "SPLAT", "SPZ", "KSPLAT", "SPLAT_ANY",
                 "POINT_CLOUD_ANY")
MESH_OR_FILE = ",".join([MESH] + [f"FILE_3D_{k}" for k in FILE_3D_KINDS] + ["FILE_3D"])
GLB_MAGIC = b"glTF"
CHUNK_JSON = 0x4E4F534A
CHUNK_BIN = 0x004E4942
FLOAT, UNSIGNED_INT = 5126, 5125
ARRAY_BUFFER, ELEMENT_ARRAY_BUFFER = 34962, 34963
LINEAR, CLAMP_TO_EDGE = 9729, 33071


@dataclass
class Mesh:
    """ComfyUI's `Types.MESH` (module docstring)."""

    vertices: "torch.Tensor"
    faces: "torch.Tensor"
    uvs: "torch.Tensor | None" = None
    vertex_colors: "torch.Tensor | None" = None
    texture: "torch.Tensor | None" = None
    normals: "torch.Tensor | None" = None
    vertex_counts: "torch.Tensor | None" = None
    face_counts: "torch.Tensor | None" = None

    def item(self, index: int) -> dict[str, Any]:
        """Batch item `index` cut to its own sizes: vertices, faces, uvs, vertex_colors, normals, texture."""
        n = int(self.vertex_counts[index]) if self.vertex_counts is not None else self.vertices.shape[1]
        m = int(self.face_counts[index]) if self.face_counts is not None else self.faces.shape[1]

        def rows(t: Any) -> Any:
            return None if t is None else t[index, :n]

        return {"vertices": self.vertices[index, :n], "faces": self.faces[index, :m], "uvs": rows(self.uvs),
                "vertex_colors": rows(self.vertex_colors), "normals": rows(self.normals),
                "texture": None if self.texture is None else self.texture[index]}


def _pad(data: bytes, fill: bytes) -> bytes:
    return data + fill * ((4 - len(data) % 4) % 4)


def glb_bytes(vertices: "torch.Tensor", faces: "torch.Tensor", *, uvs: "torch.Tensor | None" = None,
              vertex_colors: "torch.Tensor | None" = None, normals: "torch.Tensor | None" = None,
              texture: "torch.Tensor | None" = None, metadata: dict | None = None) -> bytes:
    """One triangle mesh as a GLB file's bytes (module docstring)."""
    import numpy as np
    from PIL import Image

    positions = vertices.detach().cpu().numpy().astype(np.float32)
    indices = faces.detach().cpu().numpy().astype(np.int64)
    count = positions.shape[0]
    if count == 0:
        raise ValueError("a GLB mesh needs vertices")
    if indices.size and (indices.min() < 0 or indices.max() >= count):
        raise ValueError(f"face indices outside [0, {count})")
    blobs: list[tuple[str, bytes]] = [("POSITION", positions.tobytes()),
                                      ("indices", indices.astype(np.uint32).tobytes())]
    attributes = [("TEXCOORD_0", uvs, "VEC2"), ("COLOR_0", vertex_colors, None), ("NORMAL", normals, "VEC3")]
    kinds: dict[str, str] = {}
    for name, values, kind in attributes:
        if values is None:
            continue
        array = values.detach().cpu().numpy().astype(np.float32)
        if array.shape[0] != count:
            raise ValueError(f"{name} has {array.shape[0]} entries for {count} vertices")
        if name == "COLOR_0":
            array = np.clip(array, 0.0, 1.0)
            kind = "VEC3" if array.shape[1] == 3 else "VEC4"
        blobs.append((name, array.tobytes()))
        kinds[name] = kind
    png = None
    if texture is not None:
        pixels = (texture.detach().float().clamp(0, 1).cpu().numpy() * 255).astype(np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels[..., :3], mode="RGB").save(buffer, format="PNG")
        png = buffer.getvalue()
        blobs.append(("texture", png))
    views, offsets, body = [], {}, b""
    for name, data in blobs:
        offsets[name] = len(body)
        body += _pad(data, b"\x00")
    accessors: list[dict] = []
    primitive: dict[str, Any] = {"attributes": {}, "mode": 4}
    for name, data in blobs:
        if name == "texture":
            continue
        target = ELEMENT_ARRAY_BUFFER if name == "indices" else ARRAY_BUFFER
        views.append({"buffer": 0, "byteOffset": offsets[name], "byteLength": len(data), "target": target})
        accessor: dict[str, Any] = {"bufferView": len(views) - 1, "byteOffset": 0}
        if name == "indices":
            accessor.update(componentType=UNSIGNED_INT, count=int(indices.size), type="SCALAR")
            primitive["indices"] = len(accessors)
        elif name == "POSITION":
            accessor.update(componentType=FLOAT, count=count, type="VEC3", max=positions.max(axis=0).tolist(),
                            min=positions.min(axis=0).tolist())
            primitive["attributes"][name] = len(accessors)
        else:
            accessor.update(componentType=FLOAT, count=count, type=kinds[name])
            primitive["attributes"][name] = len(accessors)
        accessors.append(accessor)
    gltf: dict[str, Any] = {"asset": {"version": "2.0", "generator": "ComfyUI"}, "buffers": [{"byteLength": len(body)}],
                            "bufferViews": views, "accessors": accessors, "meshes": [{"primitives": [primitive]}],
                            "nodes": [{"mesh": 0}], "scenes": [{"nodes": [0]}], "scene": 0}
    pbr: dict[str, Any] = {"metallicFactor": 0.0, "roughnessFactor": 0.5, "baseColorFactor": [0.22, 0.22, 0.22, 1.0]}
    textured = png is not None and "TEXCOORD_0" in primitive["attributes"]
    if textured:
        views.append({"buffer": 0, "byteOffset": offsets["texture"], "byteLength": len(png)})
        gltf["images"] = [{"bufferView": len(views) - 1, "mimeType": "image/png"}]
        gltf["samplers"] = [{"magFilter": LINEAR, "minFilter": LINEAR, "wrapS": CLAMP_TO_EDGE, "wrapT": CLAMP_TO_EDGE}]
        gltf["textures"] = [{"source": 0, "sampler": 0}]
        pbr["baseColorTexture"] = {"index": 0, "texCoord": 0}
    if textured or "COLOR_0" in primitive["attributes"]:
        pbr.update(baseColorFactor=[1.0, 1.0, 1.0, 1.0], roughnessFactor=1.0)
    gltf["materials"] = [{"pbrMetallicRoughness": pbr, "doubleSided": True}]
    primitive["material"] = 0
    if metadata:
        gltf["asset"]["extras"] = metadata
    text = _pad(json.dumps(gltf).encode("utf-8"), b" ")
    total = 12 + 8 + len(text) + 8 + len(body)
    return b"".join([struct.pack("<4sII", GLB_MAGIC, 2, total), struct.pack("<II", len(text), CHUNK_JSON), text,
                     struct.pack("<II", len(body), CHUNK_BIN), body])


def read_glb(data: bytes) -> tuple[dict, bytes]:
    """(the JSON document, the BIN chunk) of GLB bytes; raises ValueError on a malformed container."""
    magic, version, length = struct.unpack_from("<4sII", data, 0)
    if magic != GLB_MAGIC or version != 2 or length != len(data):
        raise ValueError("not a glTF 2.0 binary")
    json_length, json_type = struct.unpack_from("<II", data, 12)
    if json_type != CHUNK_JSON:
        raise ValueError("the first GLB chunk is not JSON")
    document = json.loads(data[20:20 + json_length])
    bin_length, bin_type = struct.unpack_from("<II", data, 20 + json_length)
    if bin_type != CHUNK_BIN:
        raise ValueError("the second GLB chunk is not BIN")
    start = 28 + json_length
    return document, data[start:start + bin_length]


def _mesh(value: Any) -> Mesh:
    if not isinstance(value, Mesh):
        raise NodeInputError("mesh", "a MESH", describe(value))
    return value


@v3_node("SaveGLB", display_name="Save 3D Model", category="3d", python_module="comfy_extras.nodes_hunyuan3d",
         search_aliases=("export 3d model", "save mesh"), essentials_category="Basics", output_node=True,
         inputs=[Socket("mesh", MESH_OR_FILE, tooltip="Mesh or 3D file to save"),
                 String("filename_prefix", default="3d/ComfyUI")])
def save_glb(mesh: Any, filename_prefix: str, prompt: Any = None, extra_pnginfo: Any = None) -> dict:
    """See the module docstring; a 3-D file (ComfyUI's File3D, MeshToFile3D's output) is written
    as it is, named with its own format's suffix (`glb` when it has none)."""
    from comfy_core.image.file_names import save_location
    from comfy_core.mesh.file3d import File3D

    if not isinstance(mesh, File3D):
        mesh = _mesh(mesh)
    if not isinstance(filename_prefix, str):
        raise NodeInputError("filename_prefix", "a STRING", describe(filename_prefix))
    env = current_env()
    with image_input_errors():
        folder, filename, counter, subfolder = save_location(Path(env.output_dir), filename_prefix, 0, 0)
    metadata: dict[str, str] = {}
    if not env.disable_metadata:
        if prompt is not None:
            metadata["prompt"] = json.dumps(prompt)
        if isinstance(extra_pnginfo, dict):
            metadata.update({key: json.dumps(value) for key, value in extra_pnginfo.items()})
    if isinstance(mesh, File3D):
        name = f"{filename}_{counter:05}_.{mesh.format or 'glb'}"
        (folder / name).write_bytes(mesh.get_bytes())
        return {"ui": {"3d": [{"filename": name, "subfolder": subfolder, "type": "output"}]}}
    results = []
    for index in range(mesh.vertices.shape[0]):
        item = mesh.item(index)
        if item["vertices"].shape[0] == 0 or item["faces"].shape[0] == 0:
            continue  # ComfyUI skips an empty item
        name = f"{filename}_{counter:05}_.glb"
        (folder / name).write_bytes(glb_bytes(**item, metadata=metadata))
        results.append({"filename": name, "subfolder": subfolder, "type": "output"})
        counter += 1
    return {"ui": {"3d": results}}
