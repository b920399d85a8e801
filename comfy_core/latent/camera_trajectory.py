"""Camera trajectories as Plücker ray embeddings, for Wan's camera-control models (Wan 2.1 Fun
Camera, Wan 2.2 Fun Camera), after ComfyUI's comfy_extras/nodes_camera_trajectory.py (0.3.64),
which follows VideoX-Fun and CameraCtrl (He et al. 2024, "CameraCtrl: Enabling Camera Control
for Text-to-Video Generation"); written here.

A preset motion (a rotation rate about x, y, z and a translation direction) gives frame i of n
the camera-to-world pose `[R(s * 60deg * angle) | s * 1.5 * T]` with `s = speed * i / n`
(`camera_motion`). Poses are made relative to the first frame. Every pixel centre of every frame
casts a ray: direction `d = R K^-1 (u, v, 1)` normalised, origin `o` the camera centre; its
Plücker coordinates are `(o x d, d)` (Sitzmann et al. 2021, "Light Field Networks")
(`plucker_rays`). `camera_embedding` packs the per-frame rays as the model's control latent:
the first frame repeated four times, then every four frames' six channels side by side,
`[1, 24, T, H, W]` with `T = (frames - 1) // 4 + 1`.

Intrinsics are fractions of the image (fx, fy, cx, cy), and the focal lengths are corrected for
the 1280 x 720 aspect ratio the presets were made at, as ComfyUI does.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from comfy_core.latent.video import TEMPORAL_FACTOR, is_packable_length

# Preset: (angle rates about x, y, z; translation direction), ComfyUI's CAMERA_DICT values.
CAMERA_POSES: dict[str, tuple[tuple[float, float, float], tuple[float, float, float]]] = {
    "Static": ((0.0, 0.0, 0.0), (0.0, 0.0, 0.0)),
    "Pan Up": ((0.0, 0.0, 0.0), (0.0, -1.0, 0.0)),
    "Pan Down": ((0.0, 0.0, 0.0), (0.0, 1.0, 0.0)),
    "Pan Left": ((0.0, 0.0, 0.0), (-1.0, 0.0, 0.0)),
    "Pan Right": ((0.0, 0.0, 0.0), (1.0, 0.0, 0.0)),
    "Zoom In": ((0.0, 0.0, 0.0), (0.0, 0.0, 2.0)),
    "Zoom Out": ((0.0, 0.0, 0.0), (0.0, 0.0, -2.0)),
    "Anti Clockwise (ACW)": ((0.0, 0.0, -1.0), (0.0, 0.0, 0.0)),
    "ClockWise (CW)": ((0.0, 0.0, 1.0), (0.0, 0.0, 0.0)),
}
BASE_TRANSLATION = 1.5
BASE_ANGLE = math.pi / 3
POSE_WIDTH, POSE_HEIGHT = 1280, 720  # the presets' original frame size


def _rotation(theta_x: float, theta_y: float, theta_z: float) -> np.ndarray:
    """`Rz @ Ry @ Rx` (extrinsic x, then y, then z rotations), float64 [3, 3]."""
    cx, sx, cy, sy, cz, sz = (math.cos(theta_x), math.sin(theta_x), math.cos(theta_y), math.sin(theta_y),
                              math.cos(theta_z), math.sin(theta_z))
    rx = np.array([[1.0, 0.0, 0.0], [0.0, cx, -sx], [0.0, sx, cx]])
    ry = np.array([[cy, 0.0, sy], [0.0, 1.0, 0.0], [-sy, 0.0, cy]])
    rz = np.array([[cz, -sz, 0.0], [sz, cz, 0.0], [0.0, 0.0, 1.0]])
    return rz @ ry @ rx


def camera_motion(pose: str, speed: float, frames: int) -> np.ndarray:
    """Camera-to-world poses `[frames, 4, 4]` (float64) of preset `pose` at `speed`."""
    if pose not in CAMERA_POSES:
        raise ValueError(f"camera_motion: unknown camera pose {pose!r}; one of {list(CAMERA_POSES)}")
    angle, direction = (np.array(v) for v in CAMERA_POSES[pose])
    poses = np.tile(np.eye(4), (frames, 1, 1))
    for i in range(frames):
        s = i / frames * speed
        poses[i, :3, :3] = _rotation(*(s * BASE_ANGLE * angle))
        poses[i, :3, 3] = s * BASE_TRANSLATION * direction
    return poses


def relative_poses(c2w: np.ndarray) -> np.ndarray:
    """Poses relative to the first camera: the first becomes the identity, frame i
    `inv(c2w[0]) @ c2w[i]`; float32 [F, 4, 4]."""
    first_inverse = np.linalg.inv(c2w[0])
    relative = first_inverse[None] @ c2w
    relative[0] = np.eye(4)
    return relative.astype(np.float32)


def intrinsics(fx: float, fy: float, cx: float, cy: float, width: int,
               height: int) -> tuple[float, float, float, float]:
    """Pixel intrinsics (fx, fy, cx, cy) from fractions of the frame, with the focal length along
    the wider side rescaled from the presets' 16:9 frame to `width x height`."""
    pose_ratio = POSE_WIDTH / POSE_HEIGHT
    if pose_ratio > width / height:
        fx = height * pose_ratio * fx / width
    else:
        fy = width / pose_ratio * fy / height
    return fx * width, fy * height, cx * width, cy * height


def plucker_rays(c2w: torch.Tensor, fx: float, fy: float, cx: float, cy: float, height: int,
                 width: int) -> torch.Tensor:
    """Plücker coordinates `[F, height, width, 6]` (`o x d`, then `d`) of the rays through every
    pixel centre of cameras `c2w` `[F, 4, 4]` with pixel intrinsics (fx, fy, cx, cy)."""
    dtype, device = c2w.dtype, c2w.device
    v, u = torch.meshgrid(torch.arange(height, dtype=dtype, device=device) + 0.5,
                          torch.arange(width, dtype=dtype, device=device) + 0.5, indexing="ij")
    camera_dirs = torch.stack(((u - cx) / fx, (v - cy) / fy, torch.ones_like(u)), dim=-1)  # [H, W, 3]
    camera_dirs = camera_dirs / camera_dirs.norm(dim=-1, keepdim=True)
    rotation, origin = c2w[:, :3, :3], c2w[:, :3, 3]  # [F, 3, 3], [F, 3]
    dirs = torch.einsum("hwj,fij->fhwi", camera_dirs, rotation)  # R @ d per pixel: [F, H, W, 3]
    origins = origin[:, None, None, :].expand_as(dirs)
    return torch.cat((torch.linalg.cross(origins, dirs, dim=-1), dirs), dim=-1)


def pack_camera_frames(rays: torch.Tensor) -> torch.Tensor:
    """Per-frame rays `[F, H, W, 6]` (F = 4k + 1) -> the control latent `[1, 24, T, H, W]`: the
    first frame repeated four times (so every latent frame has four), then channel `c * 4 + k` of
    latent frame t is ray channel c of the k-th of its four frames."""
    frames, height, width, channels = rays.shape
    if not is_packable_length(frames):
        raise ValueError(f"pack_camera_frames: {frames} frames are not 4k + 1")
    per_frame = rays.permute(0, 3, 1, 2)  # [F, 6, H, W]
    slots = torch.cat((per_frame[:1].expand(TEMPORAL_FACTOR, -1, -1, -1), per_frame[1:]), dim=0)  # [F + 3, 6, H, W]
    groups = slots.reshape(-1, TEMPORAL_FACTOR, channels, height, width).transpose(1, 2)  # [T, 6, 4, H, W]
    return groups.reshape(-1, channels * TEMPORAL_FACTOR, height, width).transpose(0, 1).unsqueeze(0)


def camera_embedding(pose: str, width: int, height: int, length: int, speed: float = 1.0, fx: float = 0.5,
                     fy: float = 0.5, cx: float = 0.5, cy: float = 0.5) -> torch.Tensor:
    """The Plücker control latent `[1, 24, (length - 1) // 4 + 1, height, width]` (float32) of
    preset `pose` over `length` frames (4k + 1)."""
    c2w = torch.from_numpy(relative_poses(camera_motion(pose, speed, length)))
    rays = plucker_rays(c2w, *intrinsics(fx, fy, cx, cy, width, height), height, width)
    return pack_camera_frames(rays)
