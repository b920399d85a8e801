"""Rotations for RotateMesh: behaviour of today's ComfyUI's RotateMesh
(comfy_extras/nodes_save_3d.py); written here. Euler XYZ turns about the world X axis, then Y,
then Z (R = Rz Ry Rx, angles in degrees); a quaternion is (w, x, y, z), normalised first.
A point p goes to R p; `None` stands for the identity (no rotation to do)."""
from __future__ import annotations

import math

import torch


def euler_xyz_matrix(angle_x: float, angle_y: float, angle_z: float) -> list[list[float]] | None:
    ax, ay, az = (math.radians(float(a)) for a in (angle_x, angle_y, angle_z))
    if ax == 0.0 and ay == 0.0 and az == 0.0:
        return None
    rx = [[1.0, 0.0, 0.0], [0.0, math.cos(ax), -math.sin(ax)], [0.0, math.sin(ax), math.cos(ax)]]
    ry = [[math.cos(ay), 0.0, math.sin(ay)], [0.0, 1.0, 0.0], [-math.sin(ay), 0.0, math.cos(ay)]]
    rz = [[math.cos(az), -math.sin(az), 0.0], [math.sin(az), math.cos(az), 0.0], [0.0, 0.0, 1.0]]

    def mul(a, b):
        return [[sum(a[i][k] * b[k][j] for k in range(3)) for j in range(3)] for i in range(3)]

    return mul(rz, mul(ry, rx))


def quaternion_matrix(qw: float, qx: float, qy: float, qz: float) -> list[list[float]] | None:
    """Raises ValueError for a quaternion of (near) zero length."""
    n = math.sqrt(qw * qw + qx * qx + qy * qy + qz * qz)
    if n < 1e-8:
        raise ValueError("RotateMesh: quaternion has zero magnitude")
    w, x, y, z = qw / n, qx / n, qy / n, qz / n
    if w == 1.0 and x == 0.0 and y == 0.0 and z == 0.0:
        return None
    return [[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]]


def rotate(points: torch.Tensor, matrix: list[list[float]]) -> torch.Tensor:
    """Rows of `points` [..., 3] rotated: p @ R^T."""
    r = torch.tensor(matrix, dtype=points.dtype, device=points.device)
    return points @ r.T
