"""Hunyuan3D 2.0 / 2.1 nodes (ComfyUI's comfy_extras/nodes_hunyuan3d.py, today's V3 schemas):
EmptyLatentHunyuan3Dv2, Hunyuan3Dv2Conditioning, Hunyuan3Dv2ConditioningMultiView,
VAEDecodeHunyuan3D, VoxelToMeshBasic, VoxelToMesh. SaveGLB and the MESH type are nodes/mesh.py's.

- EmptyLatentHunyuan3Dv2: zeros `[batch_size, 64, resolution]` (shape tokens), LATENT type "hunyuan3dv2".
- Hunyuan3Dv2Conditioning: the image encoder's last hidden state as the positive context, zeros of
  its shape as the negative.
- Hunyuan3Dv2ConditioningMultiView: the given views' last hidden states, each plus a 1-D sin-cos
  position embedding of its view index (front 0, left 1, back 2, right 3; MAE's
  `get_1d_sincos_pos_embed`: `[sin(i w), cos(i w)]`, `w_k = 10000^(-k / (D/2))`), joined along the
  tokens in that order; the negative zeros of that shape. At least one view is needed.
- VAEDecodeHunyuan3D: the ShapeVAE's occupancy grid (comfy_core/families/hunyuan3d/vae_patcher.py)
  as a VOXEL, `data` `[B, R+1, R+1, R+1]` indexed (z, y, x).
- VoxelToMesh ("surface net" or "basic") / VoxelToMeshBasic: each grid of the batch meshed at the
  threshold (comfy_core/families/hunyuan3d/voxel_mesh.py); the MESH stacks them (rows padded, with
  per-item counts, when their sizes differ, where ComfyUI's stack fails).

Today's stored copy of the module (no repository named) adds `vertex_colors` / `reference_image` to
VoxelToMesh; today's templates save two widgets for it, 0.3.64's schema, which is the one here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graph.v3_schema import Combo, Float, Int, Output, Socket, v3_node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe

MODULE = "comfy_extras.nodes_hunyuan3d"
VOXEL = "VOXEL"
VIEWS = ("front", "left", "back", "right")
ALGORITHMS = ["surface net", "basic"]


@dataclass
class Voxel:
    """ComfyUI's `Types.VOXEL`: `data` `[B, D, H, W]`."""

    data: Any


def _voxel(value: Any) -> Voxel:
    data = getattr(value, "data", None)
    if getattr(data, "ndim", None) != 4:
        raise NodeInputError("voxel", "a VOXEL (data [B, D, H, W])", describe(value))
    return value


def _tokens(value: Any, input_name: str) -> Any:
    import torch

    tokens = getattr(value, "last_hidden_state", None)
    if not isinstance(tokens, torch.Tensor) or tokens.ndim != 3:
        raise NodeInputError(input_name, "a CLIP_VISION_OUTPUT (from CLIPVisionEncode)", describe(value))
    return tokens


@v3_node("EmptyLatentHunyuan3Dv2", category="latent/3d", python_module=MODULE,
         inputs=[Int("resolution", default=3072, min=1, max=8192),
                 Int("batch_size", default=1, min=1, max=4096, tooltip="The number of latent images in the batch.")],
         outputs=[Output("LATENT")])
def empty_latent_hunyuan3d(resolution: int, batch_size: int) -> tuple[dict]:
    import torch

    resolution = checks.integer(resolution, "resolution", 1, 8192)
    batch_size = checks.integer(batch_size, "batch_size", 1, 4096)
    return ({"samples": torch.zeros(batch_size, 64, resolution), "type": "hunyuan3dv2"},)


@v3_node("Hunyuan3Dv2Conditioning", category="conditioning/video_models", python_module=MODULE,
         inputs=[Socket("clip_vision_output", "CLIP_VISION_OUTPUT")],
         outputs=[Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative")])
def hunyuan3d_conditioning(clip_vision_output: Any) -> tuple[list, list]:
    import torch

    embeds = _tokens(clip_vision_output, "clip_vision_output")
    return [[embeds, {}]], [[torch.zeros_like(embeds), {}]]


def view_embeddings(width: int, views: int = len(VIEWS)) -> Any:
    """`[views, width]`: the 1-D sin-cos embedding of positions 0..views-1 (float32)."""
    import torch

    omega = 1.0 / 10000 ** (torch.arange(width // 2, dtype=torch.float32) / (width / 2.0))
    angles = torch.arange(views, dtype=torch.float32)[:, None] * omega[None]
    return torch.cat([angles.sin(), angles.cos()], dim=1)


@v3_node("Hunyuan3Dv2ConditioningMultiView", category="conditioning/video_models", python_module=MODULE,
         inputs=[Socket(view, "CLIP_VISION_OUTPUT", optional=True) for view in VIEWS],
         outputs=[Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative")])
def hunyuan3d_conditioning_multiview(front: Any = None, left: Any = None, back: Any = None,
                                     right: Any = None) -> tuple[list, list]:
    import torch

    given = [(i, view, value) for i, (view, value) in enumerate(zip(VIEWS, (front, left, back, right)))
             if value is not None]
    if not given:
        raise NodeInputError("front", "at least one view's CLIP_VISION_OUTPUT (front, left, back or right)", "none")
    parts = []
    positions = None
    for index, view, value in given:
        tokens = _tokens(value, view)
        if positions is None:
            positions = view_embeddings(tokens.shape[-1])
        if tokens.shape[-1] != positions.shape[-1]:
            raise NodeInputError(view, f"tokens {positions.shape[-1]} wide, as the first view's",
                                 f"{tokens.shape[-1]} wide")
        parts.append(tokens + positions[index].to(tokens.device).reshape(1, 1, -1))  # float32, as ComfyUI adds it
    embeds = torch.cat(parts, dim=1)
    return [[embeds, {}]], [[torch.zeros_like(embeds), {}]]


@v3_node("VAEDecodeHunyuan3D", category="latent/3d", python_module=MODULE,
         inputs=[Socket("samples", "LATENT"), Socket("vae", "VAE"),
                 Int("num_chunks", default=8000, min=1000, max=500000),
                 Int("octree_resolution", default=256, min=16, max=512)],
         outputs=[Output(VOXEL)])
def vae_decode_hunyuan3d(samples: dict, vae: Any, num_chunks: int, octree_resolution: int) -> tuple[Voxel]:
    latent = checks.latent(samples, ndims=(3,))
    num_chunks = checks.integer(num_chunks, "num_chunks", 1000, 500000)
    octree_resolution = checks.integer(octree_resolution, "octree_resolution", 16, 512)
    if not callable(getattr(vae, "decode", None)) or getattr(vae, "latent_dim", None) != 1:
        raise NodeInputError("vae", "a Hunyuan3D shape VAE (from a Hunyuan3D checkpoint)", describe(vae))
    try:
        data = vae.decode(latent, vae_options={"num_chunks": num_chunks, "octree_resolution": octree_resolution})
    except TypeError:
        raise NodeInputError("vae", "a Hunyuan3D shape VAE (its decode takes vae_options)", describe(vae)) from None
    return (Voxel(data),)


def _meshes(voxel: Any, algorithm: str, threshold: float) -> tuple[Any]:
    import torch

    from comfy_core.families.hunyuan3d.voxel_mesh import blocky_mesh, surface_net
    from nodes.mesh import Mesh

    mesh_of = blocky_mesh if algorithm == "basic" else surface_net
    items = [mesh_of(grid, threshold) for grid in _voxel(voxel).data]
    vertices, faces = [v for v, _ in items], [f for _, f in items]
    if len({v.shape[0] for v in vertices}) == 1 and len({f.shape[0] for f in faces}) == 1:
        return (Mesh(torch.stack(vertices), torch.stack(faces)),)
    rows = max(v.shape[0] for v in vertices)
    tris = max(f.shape[0] for f in faces)
    padded_v = torch.stack([torch.cat([v, v.new_zeros(rows - v.shape[0], 3)]) for v in vertices])
    padded_f = torch.stack([torch.cat([f, f.new_zeros(tris - f.shape[0], 3)]) for f in faces])
    return (Mesh(padded_v, padded_f, vertex_counts=torch.tensor([v.shape[0] for v in vertices]),
                 face_counts=torch.tensor([f.shape[0] for f in faces])),)


@v3_node("VoxelToMeshBasic", category="3d", python_module=MODULE,
         inputs=[Socket("voxel", VOXEL), Float("threshold", default=0.6, min=-1.0, max=1.0, step=0.01)],
         outputs=[Output("MESH")])
def voxel_to_mesh_basic(voxel: Any, threshold: float) -> tuple[Any]:
    return _meshes(voxel, "basic", checks.number(threshold, "threshold", -1.0, 1.0))


@v3_node("VoxelToMesh", category="3d", python_module=MODULE,
         inputs=[Socket("voxel", VOXEL), Combo("algorithm", ALGORITHMS),
                 Float("threshold", default=0.6, min=-1.0, max=1.0, step=0.01)],
         outputs=[Output("MESH")])
def voxel_to_mesh(voxel: Any, algorithm: str, threshold: float) -> tuple[Any]:
    algorithm = checks.choice(algorithm, ALGORITHMS, "algorithm")
    return _meshes(voxel, algorithm, checks.number(threshold, "threshold", -1.0, 1.0))
