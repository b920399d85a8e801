"""Module-level helper of ComfyUI's `comfy_extras.nodes_stable3d` that packs import directly.

`camera_embeddings(elevation, azimuth)`: the Zero123 camera vector ComfyUI's
StableZero123_Conditioning nodes concatenate to the CLIP-vision embedding (Easy-Use's
zero123Loader imports it at load time). As in ComfyUI's comfy_extras/nodes_stable3d.py the four
entries are the polar offset from the horizon (`deg2rad(-elevation)`, Zero123 measures polar
angle from 90 - elevation), `sin` and `cos` of the azimuth, and the fixed 90-degree camera
distance term, shaped `[1, 1, 4]`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def camera_embeddings(elevation: float, azimuth: float) -> "torch.Tensor":
    """The `[1, 1, 4]` Zero123 camera embedding for `elevation` and `azimuth` in degrees."""
    import torch

    elevation_t = torch.as_tensor([elevation])
    azimuth_t = torch.as_tensor([azimuth])
    azimuth_rad = torch.deg2rad(azimuth_t)
    columns = [
        torch.deg2rad(-elevation_t),                       # (90 - elevation) - 90
        torch.sin(azimuth_rad),
        torch.cos(azimuth_rad),
        torch.deg2rad(torch.full_like(elevation_t, 90)),   # 90 - 0
    ]
    return torch.stack(columns, dim=-1).unsqueeze(1)
