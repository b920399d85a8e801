"""3-D files read into one triangle mesh: behaviour of today's ComfyUI's Get3DComponents
(comfy_extras/nodes_mesh_io.py with comfy_extras/mesh3d/fileio/gltf_read.py and
mesh_file_read.py); written here, with numpy.

* glTF 2.0, binary (.glb) or JSON (.gltf with data: URIs, or files next to a disk-backed model,
  never outside its folder): the default scene's node tree (matrix or translation / rotation /
  scale) with every triangle primitive (modes 4, 5, 6; strips alternate winding) placed in world
  space, normals by the inverse transpose, winding reversed under a mirroring transform;
  POSITION, indices, TEXCOORD_0, COLOR_0 (integer colours normalised), NORMAL; strided and sparse
  accessors. The first material's base-colour texture (PNG / JPEG / WebP, as RGB 0..1) is kept.
  Required extensions other than ComfyUI's supported four are an error.
* OBJ: `v` (with optional r g b, taken as sRGB and made linear), `vt` (v flipped: 1 - v), `vn`,
  `f` polygons fanned; one vertex per distinct v/vt/vn corner; normals kept only when every corner
  has one; materials ignored.
* STL: binary (84-byte header + 50-byte facets, colours from a "COLOR=" header in the
  VisCAM/SolidView convention) or ASCII; three vertices per facet (unwelded) with the facet normal.

Primitives are merged as MergeMeshes merges meshes: uvs zero and colours white (as many channels
as the widest) where a primitive lacks them; normals only when every primitive has them.
"""
from __future__ import annotations

import base64
import json
import logging
import os
import re
import struct
import urllib.parse
from io import BytesIO

import numpy as np

COMPONENTS = {5120: np.int8, 5121: np.uint8, 5122: np.int16, 5123: np.uint16, 5125: np.uint32, 5126: np.float32}
WIDTH = {"SCALAR": 1, "VEC2": 2, "VEC3": 3, "VEC4": 4, "MAT2": 4, "MAT3": 9, "MAT4": 16}
SUPPORTED_REQUIRED = {"EXT_mesh_gpu_instancing", "EXT_texture_webp", "KHR_materials_emissive_strength",
                      "KHR_materials_unlit"}


def sniff_format(data: bytes) -> str:
    if data[:4] == b"glTF":
        return "glb"
    head = data[:512].lstrip()
    if head[:1] == b"{":
        return "gltf"
    if head[:5].lower() == b"solid":
        return "stl"
    return ""


def srgb_to_linear(c: np.ndarray) -> np.ndarray:
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4).astype(np.float32)


# -- glTF ------------------------------------------------------------------------------------------

def _container(data: bytes) -> tuple[dict, bytes | None]:
    if data[:4] != b"glTF":
        return json.loads(data), None
    if len(data) < 12:
        raise ValueError("GLB file truncated (missing 12-byte header)")
    _, version, _ = struct.unpack_from("<4sII", data, 0)
    if version != 2:
        raise ValueError(f"unsupported GLB container version {version}")
    document, binary, at = None, None, 12
    while at + 8 <= len(data):
        length, kind = struct.unpack_from("<II", data, at)
        chunk = data[at + 8:at + 8 + length]
        at += 8 + length
        if kind == 0x4E4F534A and document is None:
            document = chunk
        elif kind == 0x004E4942 and binary is None:
            binary = chunk
    if document is None:
        raise ValueError("GLB file has no JSON chunk")
    return json.loads(document), binary


def _uri_bytes(uri: str, base_dir: str | None) -> bytes:
    if uri.startswith("data:"):
        header, _, payload = uri.partition(",")
        return base64.b64decode(payload) if ";base64" in header else urllib.parse.unquote_to_bytes(payload)
    if urllib.parse.urlparse(uri).scheme:
        raise ValueError(f"glTF references URI scheme {urllib.parse.urlparse(uri).scheme!r}; "
                         "only relative file paths are allowed")
    if base_dir is None:
        raise ValueError(f"glTF references external file {uri!r} but the source is an in-memory stream; "
                         "use .glb (self-contained) or a disk-backed file")
    relative = urllib.parse.unquote(uri)
    root = os.path.realpath(base_dir)
    path = os.path.realpath(os.path.join(root, relative))
    if os.path.isabs(relative) or os.path.commonpath([root, path]) != root:
        raise ValueError(f"glTF references file {uri!r} outside the model directory")
    with open(path, "rb") as handle:
        return handle.read()


class _Gltf:
    def __init__(self, data: bytes, base_dir: str | None) -> None:
        self.doc, binary = _container(data)
        version = str(self.doc.get("asset", {}).get("version", ""))
        if version.partition(".")[0] != "2":
            raise ValueError(f"unsupported glTF asset version {version or 'unknown'}; only glTF 2.x is supported")
        self.base_dir = base_dir
        self.buffers = []
        for buffer in self.doc.get("buffers", []):
            if "uri" in buffer:
                self.buffers.append(_uri_bytes(buffer["uri"], base_dir))
            elif binary is None:
                raise ValueError("glTF buffer has no uri and there is no GLB BIN chunk")
            else:
                self.buffers.append(binary)

    def view(self, index: int) -> bytes:
        v = self.doc["bufferViews"][index]
        start = v.get("byteOffset", 0)
        return self.buffers[v.get("buffer", 0)][start:start + v["byteLength"]]

    def accessor(self, index: int) -> tuple[np.ndarray, bool]:
        acc = self.doc["accessors"][index]
        count, width = acc["count"], WIDTH[acc["type"]]
        dtype = np.dtype(COMPONENTS[acc["componentType"]])
        size = dtype.itemsize * width
        if "bufferView" in acc:
            view = self.doc["bufferViews"][acc["bufferView"]]
            buffer = self.buffers[view.get("buffer", 0)]
            start = view.get("byteOffset", 0) + acc.get("byteOffset", 0)
            stride = view.get("byteStride") or size
            if stride == size:
                out = np.frombuffer(buffer, dtype, count * width, start).reshape(count, width).copy()
            else:
                rows = [buffer[start + i * stride:start + i * stride + size] for i in range(count)]
                out = np.frombuffer(b"".join(rows), dtype).reshape(count, width).copy()
        else:
            out = np.zeros((count, width), dtype)
        sparse = acc.get("sparse")
        if sparse:
            n = sparse["count"]
            ind, val = sparse["indices"], sparse["values"]
            iview = self.doc["bufferViews"][ind["bufferView"]]
            where = np.frombuffer(self.buffers[iview.get("buffer", 0)], np.dtype(COMPONENTS[ind["componentType"]]), n,
                                  iview.get("byteOffset", 0) + ind.get("byteOffset", 0)).astype(np.int64)
            vview = self.doc["bufferViews"][val["bufferView"]]
            out[where] = np.frombuffer(self.buffers[vview.get("buffer", 0)], dtype, n * width,
                                       vview.get("byteOffset", 0) + val.get("byteOffset", 0)).reshape(n, width)
        return out, bool(acc.get("normalized"))


def _as_float(values: np.ndarray, normalized: bool) -> np.ndarray:
    if values.dtype == np.float32:
        return values
    out = values.astype(np.float32)
    if not normalized:
        return out
    scale = {np.dtype(np.uint8): 255.0, np.dtype(np.uint16): 65535.0, np.dtype(np.int8): 127.0,
             np.dtype(np.int16): 32767.0}.get(values.dtype)
    if scale is None:
        return out
    return np.maximum(out / scale, -1.0)


def _rotation(x: float, y: float, z: float, w: float) -> np.ndarray:
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]], np.float64)


def _local(node: dict) -> np.ndarray:
    if "matrix" in node:
        return np.array(node["matrix"], np.float64).reshape(4, 4).T  # column-major in the file
    m = np.eye(4)
    m[:3, :3] = _rotation(*node.get("rotation", (0.0, 0.0, 0.0, 1.0))) * np.array(node.get("scale", (1, 1, 1)), float)
    m[:3, 3] = node.get("translation", (0.0, 0.0, 0.0))
    return m


def _mesh_nodes(doc: dict):
    """(node, world matrix) for every node with a mesh in the default scene (depth first)."""
    nodes = doc.get("nodes", [])
    scenes = doc.get("scenes")
    if scenes:
        roots = scenes[doc.get("scene", 0)].get("nodes", [])
    elif nodes:
        children = {c for n in nodes for c in n.get("children", [])}
        roots = [i for i in range(len(nodes)) if i not in children]
    else:
        for i in range(len(doc.get("meshes", []))):
            yield {"mesh": i}, np.eye(4)
        return
    seen: set[int] = set()
    stack = [(i, np.eye(4)) for i in roots]
    while stack:
        index, parent = stack.pop()
        if index in seen:
            continue
        seen.add(index)
        node = nodes[index]
        world = parent @ _local(node)
        if "mesh" in node:
            yield node, world
        stack.extend((child, world) for child in node.get("children", []))


def _triangles(indices: np.ndarray, mode: int) -> np.ndarray:
    if mode == 4:
        return indices[:len(indices) // 3 * 3].reshape(-1, 3)
    if len(indices) < 3:
        return np.zeros((0, 3), np.int64)
    if mode == 6:  # fan
        return np.stack([np.full(len(indices) - 2, indices[0]), indices[1:-1], indices[2:]], 1)
    strip = np.stack([indices[:-2], indices[1:-1], indices[2:]], 1)
    strip[1::2] = strip[1::2, ::-1]
    return strip


def read_gltf(data: bytes, base_dir: str | None = None) -> tuple[list[dict], dict]:
    """(primitives, {"texture": [H, W, 3] or None}) of a glTF 2.0 file (module docstring)."""
    g = _Gltf(data, base_dir)
    unsupported = set(g.doc.get("extensionsRequired", [])) - SUPPORTED_REQUIRED
    if unsupported:
        raise ValueError(f"glTF requires extensions this loader does not support: {sorted(unsupported)}")
    prims = []
    for node, world in _mesh_nodes(g.doc):
        linear = world[:3, :3]
        det = float(np.linalg.det(linear))
        normal_matrix = np.linalg.inv(linear).T if abs(det) > 1e-12 else linear
        for prim in g.doc["meshes"][node["mesh"]].get("primitives", []):
            mode = prim.get("mode", 4)
            attrs = prim.get("attributes", {})
            if mode not in (4, 5, 6) or "POSITION" not in attrs:
                continue
            pos = _as_float(*g.accessor(attrs["POSITION"]))[:, :3].astype(np.float64)
            n = pos.shape[0]
            if n == 0:
                continue
            pos = pos @ linear.T + world[:3, 3]
            indices = (g.accessor(prim["indices"])[0].reshape(-1).astype(np.int64) if "indices" in prim
                       else np.arange(n, dtype=np.int64))
            faces = _triangles(indices, mode)
            if faces.shape[0] == 0:
                continue
            if det < 0:
                faces = np.ascontiguousarray(faces[:, ::-1])
            out = {"positions": pos.astype(np.float32), "faces": faces, "uvs": None, "colors": None, "normals": None,
                   "material": prim.get("material")}
            if "TEXCOORD_0" in attrs:
                uv = _as_float(*g.accessor(attrs["TEXCOORD_0"]))
                out["uvs"] = uv[:n, :2] if uv.shape[0] >= n else None
            if "COLOR_0" in attrs:
                values, normalized = g.accessor(attrs["COLOR_0"])
                colors = _as_float(values, normalized or values.dtype != np.float32)
                if colors.shape[0] >= n:
                    out["colors"] = np.clip(colors[:n], 0.0, 1.0)
            if "NORMAL" in attrs:
                normals = _as_float(*g.accessor(attrs["NORMAL"]))
                if normals.shape[0] >= n:
                    normals = normals[:n, :3].astype(np.float64) @ normal_matrix.T
                    out["normals"] = (normals / np.maximum(np.linalg.norm(normals, axis=1, keepdims=True), 1e-12)
                                      ).astype(np.float32)
            prims.append(out)
    materials = [p["material"] for p in prims if p["material"] is not None]
    if len(set(materials)) > 1:
        logging.warning("Get3DComponents: %d materials found; keeping the first one's texture", len(set(materials)))
    texture = None
    if materials:
        info = g.doc["materials"][materials[0]].get("pbrMetallicRoughness", {}).get("baseColorTexture")
        texture = _texture(g, info)
    return prims, {"texture": texture}


def _texture(g: _Gltf, info: dict | None) -> np.ndarray | None:
    from PIL import Image

    if info is None:
        return None
    definition = g.doc["textures"][info["index"]]
    source = definition.get("source")
    if source is None:
        source = definition.get("extensions", {}).get("EXT_texture_webp", {}).get("source")
    if source is None:
        return None
    image = g.doc["images"][source]
    if "bufferView" in image:
        raw = g.view(image["bufferView"])
    elif "uri" in image:
        raw = _uri_bytes(image["uri"], g.base_dir)
    else:
        return None
    return np.asarray(Image.open(BytesIO(bytes(raw))).convert("RGB"), dtype=np.float32) / 255.0


# -- OBJ, STL ------------------------------------------------------------------------------------

def read_obj(data: bytes) -> dict:
    text = data.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\\\n", "")
    positions, position_colors, uvs, normals = [], [], [], []
    corners: dict[tuple, int] = {}
    out_p, out_c, out_uv, out_n, faces = [], [], [], [], []
    state = {"color": False, "uv": False, "normal": False, "missing": False}

    def resolve(token: str, count: int) -> int:
        i = int(token)
        j = i - 1 if i > 0 else count + i
        if i == 0 or not 0 <= j < count:
            raise ValueError(f"OBJ index {i} out of range for {count} entries")
        return j

    def corner(spec: str) -> int:
        parts = spec.split("/")
        vi = resolve(parts[0], len(positions))
        ti = resolve(parts[1], len(uvs)) if len(parts) > 1 and parts[1] else None
        ni = resolve(parts[2], len(normals)) if len(parts) > 2 and parts[2] else None
        key = (vi, ti, ni)
        if key not in corners:
            corners[key] = len(out_p)
            out_p.append(positions[vi])
            out_c.append(position_colors[vi])
            if ti is not None:
                state["uv"] = True
                out_uv.append((uvs[ti][0], 1.0 - uvs[ti][1]))
            else:
                out_uv.append((0.0, 0.0))
            if ni is not None:
                state["normal"] = True
                out_n.append(normals[ni])
            else:
                state["missing"] = True
                out_n.append((0.0, 0.0, 0.0))
        return corners[key]

    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        tag = parts[0]
        if tag == "v":
            positions.append(tuple(float(x) for x in parts[1:4]))
            if len(parts) >= 7:
                position_colors.append(tuple(float(x) for x in parts[4:7]))
                state["color"] = True
            else:
                position_colors.append((1.0, 1.0, 1.0))
        elif tag == "vt":
            uvs.append((float(parts[1]), float(parts[2]) if len(parts) > 2 else 0.0))
        elif tag == "vn":
            normals.append(tuple(float(x) for x in parts[1:4]))
        elif tag == "f" and len(parts) >= 4:
            ids = [corner(s) for s in parts[1:]]
            faces += [(ids[0], ids[i], ids[i + 1]) for i in range(1, len(ids) - 1)]
    if not faces:
        raise ValueError("OBJ contains no faces")
    prim = {"positions": np.array(out_p, np.float32), "faces": np.array(faces, np.int64),
            "uvs": np.array(out_uv, np.float32) if state["uv"] else None,
            "colors": srgb_to_linear(np.clip(np.array(out_c, np.float32), 0, 1)) if state["color"] else None,
            "normals": None, "material": None}
    if state["normal"] and not state["missing"]:
        n = np.array(out_n, np.float32)
        length = np.linalg.norm(n, axis=1, keepdims=True)
        if float(length.max()) > 1e-6:
            prim["normals"] = n / np.maximum(length, 1e-12)
    return prim


_STL_FACET = np.dtype([("normal", "<f4", (3,)), ("verts", "<f4", (3, 3)), ("attr", "<u2")])
_ASCII_FACET = re.compile(rb"facet\s+normal\s+(\S+)\s+(\S+)\s+(\S+).*?vertex\s+(\S+)\s+(\S+)\s+(\S+).*?"
                          rb"vertex\s+(\S+)\s+(\S+)\s+(\S+).*?vertex\s+(\S+)\s+(\S+)\s+(\S+)", re.DOTALL)


def read_stl(data: bytes) -> dict:
    count = struct.unpack_from("<I", data, 80)[0] if len(data) >= 84 else 0
    if count > 0 and 84 + count * _STL_FACET.itemsize == len(data):
        return _stl_binary(data, count)
    if b"solid" in data[:9]:
        facets = _ASCII_FACET.findall(data)
        if not facets:
            raise ValueError("ASCII STL contains no facets")
        values = np.array(facets).astype(np.float32)
        return _stl_prim(values[:, 3:12].reshape(-1, 3), np.repeat(values[:, 0:3], 3, axis=0))
    count = min(count, (len(data) - 84) // _STL_FACET.itemsize if len(data) >= 84 else 0)
    if count <= 0:
        raise ValueError("not a valid STL file (neither binary layout nor ASCII 'solid')")
    return _stl_binary(data, count)


def _stl_binary(data: bytes, count: int) -> dict:
    facets = np.frombuffer(data, _STL_FACET, count=count, offset=84)
    colors = None
    header = data[:80]
    at = header.find(b"COLOR=")
    if at >= 0 and at + 10 <= len(header):
        default = np.frombuffer(header, np.uint8, 3, at + 6).astype(np.float32) / 255.0
        a = facets["attr"].astype(np.uint16)
        own = np.stack([a & 0x1F, (a >> 5) & 0x1F, (a >> 10) & 0x1F], 1).astype(np.float32) / 31.0
        colors = srgb_to_linear(np.repeat(np.where(((a & 0x8000) != 0)[:, None], default[None], own), 3, axis=0))
    return _stl_prim(facets["verts"].reshape(-1, 3).astype(np.float32),
                     np.repeat(facets["normal"], 3, axis=0).astype(np.float32), colors)


def _stl_prim(positions: np.ndarray, normals: np.ndarray, colors: np.ndarray | None = None) -> dict:
    if positions.shape[0] == 0:
        raise ValueError("STL contains no facets")
    length = np.linalg.norm(normals, axis=1, keepdims=True)
    return {"positions": np.ascontiguousarray(positions), "faces": np.arange(positions.shape[0]).reshape(-1, 3),
            "uvs": None, "colors": colors, "material": None,
            "normals": normals / np.maximum(length, 1e-12) if float(length.max()) > 1e-6 else None}


def merge_primitives(prims: list[dict]) -> dict:
    """One mesh of all primitives (module docstring): vertices, faces, uvs, colors, normals."""
    any_uv = any(p["uvs"] is not None for p in prims)
    any_color = any(p["colors"] is not None for p in prims)
    all_normals = all(p["normals"] is not None for p in prims)
    channels = max((p["colors"].shape[1] for p in prims if p["colors"] is not None), default=3)
    verts, faces, uvs, colors, normals = [], [], [], [], []
    offset = 0
    for p in prims:
        n = p["positions"].shape[0]
        verts.append(p["positions"])
        faces.append(p["faces"] + offset)
        offset += n
        if any_uv:
            uvs.append(p["uvs"] if p["uvs"] is not None else np.zeros((n, 2), np.float32))
        if any_color:
            c = p["colors"] if p["colors"] is not None else np.ones((n, channels), np.float32)
            if c.shape[1] < channels:
                c = np.concatenate([c, np.ones((n, channels - c.shape[1]), np.float32)], 1)
            colors.append(c)
        if all_normals:
            normals.append(p["normals"])
    return {"vertices": np.concatenate(verts), "faces": np.concatenate(faces),
            "uvs": np.concatenate(uvs) if any_uv else None, "colors": np.concatenate(colors) if any_color else None,
            "normals": np.concatenate(normals) if all_normals else None}
