"""A loaded MoGe model (ComfyUI's MOGE_MODEL) and its `infer`: one forward pass plus MoGe's
post-processing, as ComfyUI's `comfy/ldm/moge/model.py: MoGeModel.infer` does it (written here):

1. `num_tokens = int(lo + resolution_level / 9 * (hi - lo))` over the version's token range
   (v1 1200..2500, v2 / v3 1200..3600); the forward runs in float32 (ComfyUI runs MoGe-3 in its
   text-encoder dtype, float16 on a GPU: results differ by that rounding);
2. the binary mask is `mask > 0.5`;
3. camera: with no `fov_x`, focal and shift are solved from the masked points
   (`moge_geometry.recover_focal_shift`); a focal that is not finite and positive falls back to a
   60-degree horizontal FoV, and the shift is solved again for the focal in force. With `fov_x`
   (degrees) the focal is `aspect / diag / tan(fov_x / 2)` and only the shift is solved;
4. intrinsics `[[f diag / 2 / aspect, 0, 0.5], [0, f diag / 2, 0.5], [0, 0, 1]]`; the shift added
   to z; v2 drops from the mask the pixels whose shifted depth is not positive;
5. `force_projection`: the points re-made from the depth through the intrinsics;
6. v2's metric scale multiplies points and depth (`apply_metric_scale`);
7. `apply_mask`: points and depth `inf`, normals 0 outside the mask.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from comfy_core.models.resident import ResidentModel
from comfy_core.models.moge import MoGeV1, MoGeV2, MoGeWeightsError, network_from_state_dict
from comfy_core.models.moge_geometry import depth_map_to_point_map, intrinsics_from_focal_center, recover_focal_shift

MASK_THRESHOLD = 0.5
FALLBACK_FOV = 60.0
TOKEN_RANGES = {"v1": (1200, 2500), "v2": (1200, 3600), "v3": (1200, 3600)}


class MoGeModel(ResidentModel):
    """ComfyUI's MOGE_MODEL: the network, its version, and where it runs (`load_device`; kept on
    `offload_device` between runs)."""

    def __init__(self, network: MoGeV1 | MoGeV2, *, load_device: torch.device | str = "cpu",
                 offload_device: torch.device | str = "cpu") -> None:
        super().__init__(network, load_device=load_device, offload_device=offload_device)
        self.version = network.config.version
        self.dtype = torch.float32
        self.mask_threshold = MASK_THRESHOLD
        self.num_tokens_range = TOKEN_RANGES[self.version]

    def num_tokens(self, resolution_level: int) -> int:
        lo, hi = self.num_tokens_range
        return int(lo + (resolution_level / 9) * (hi - lo))

    @torch.no_grad()
    def forward(self, image: torch.Tensor, num_tokens: int, refine_steps: int = 3) -> dict[str, torch.Tensor]:
        """The network's raw outputs for `image` [B, 3, H, W] in 0..1, on the load device
        (`refine_steps`: MoGe-3's refiner passes; the other versions have none)."""
        extra = {"refine_steps": refine_steps} if self.version == "v3" else {}
        with self.loaded():
            return self.model(image.to(device=self.load_device, dtype=torch.float32), num_tokens=num_tokens, **extra)

    @torch.no_grad()
    def infer(self, image: torch.Tensor, num_tokens: int | None = None, resolution_level: int = 9,
              fov_x: float | torch.Tensor | None = None, force_projection: bool = True, apply_mask: bool = True,
              apply_metric_scale: bool = True, refine_steps: int = 3) -> dict[str, torch.Tensor]:
        """points [B, H, W, 3], depth [B, H, W], intrinsics [B, 3, 3], mask [B, H, W] (bool),
        normal [B, H, W, 3] (v2 with normals) for `image` [B, 3, H, W] in 0..1 (module docstring)."""
        height, width = image.shape[-2:]
        aspect = width / height
        if num_tokens is None:
            num_tokens = self.num_tokens(resolution_level)
        out = self.forward(image, num_tokens, refine_steps)
        points = out["points"].float()
        mask = out["mask"] > self.mask_threshold
        normal = out["normal"].float() if "normal" in out else None
        metric_scale = out.get("metric_scale")
        diag = math.sqrt(1 + aspect ** 2)

        def focal_for(fov_degrees: Any) -> torch.Tensor:
            fov = torch.as_tensor(fov_degrees, device=points.device, dtype=points.dtype)
            return aspect / diag / torch.tan(torch.deg2rad(fov / 2))

        if fov_x is None:
            focal, shift = recover_focal_shift(points, mask)
            bad = ~torch.isfinite(focal) | (focal <= 0)
            if bool(bad.any()):
                focal = torch.where(bad, focal_for(FALLBACK_FOV), focal)
                _, shift = recover_focal_shift(points, mask, focal=focal)
        else:
            focal = focal_for(fov_x).expand(points.shape[0])
            _, shift = recover_focal_shift(points, mask, focal=focal)
        f_diag = focal / 2 * diag
        half = torch.tensor(0.5, device=points.device, dtype=points.dtype)
        intrinsics = intrinsics_from_focal_center(f_diag / aspect, f_diag, half, half)
        points[..., 2] = points[..., 2] + shift[..., None, None]
        if self.version != "v1":
            mask = mask & (points[..., 2] > 0)
        depth = points[..., 2].clone()
        if force_projection:
            points = depth_map_to_point_map(depth, intrinsics)
        if apply_metric_scale and metric_scale is not None:
            scale = metric_scale.float()
            points = points * scale[:, None, None, None]
            depth = depth * scale[:, None, None]
        if apply_mask:
            points = torch.where(mask[..., None], points, torch.full_like(points, float("inf")))
            depth = torch.where(mask, depth, torch.full_like(depth, float("inf")))
            if normal is not None:
                normal = torch.where(mask[..., None], normal, torch.zeros_like(normal))
        result = {"points": points, "depth": depth, "intrinsics": intrinsics, "mask": mask}
        if normal is not None:
            result["normal"] = normal
        return result


def load_moge(path: str | Path, *, load_device: torch.device | str = "cpu",
              offload_device: torch.device | str = "cpu") -> MoGeModel:
    """The MoGe model in the file `path` (`.safetensors` read through the checkpoint reader)."""
    from comfy_core.checkpoint.errors import CheckpointError
    from comfy_core.checkpoint.reader import load_tensor_file

    path = Path(path)
    try:
        state, _metadata = load_tensor_file(path)
    except CheckpointError as exc:
        raise MoGeWeightsError(f"{path.name}: not a readable weights file ({exc})") from exc
    network = network_from_state_dict(state, path.name)
    return MoGeModel(network, load_device=load_device, offload_device=offload_device)
