"""Optical flow models (the `optical_flow` model folder): torchvision's RAFT (Teed & Deng 2020,
"RAFT: Recurrent All-Pairs Field Transforms for Optical Flow"), loaded from its own state dicts
(`raft_large_C_T_SKHT_V2-ff5fadd5` is torchvision's raft_large weight file; raft_small's layout is
accepted too) into torchvision's RAFT class, never downloaded. ComfyUI's OpticalFlowLoader takes
torchvision's RAFT-large (files told by `feature_encoder.` + `context_encoder.` + `update_block.`).

`OpticalFlowModel.flow(a, b)`: frames `[3, H, W]` in 0..1 -> the flow `[2, H, W]` (dx, dy in pixels)
from `a` to `b`: both resized (bilinear) to multiples of 8, mapped to -1..1, RAFT's last refinement
resized back (VOID's `RaftOpticalFlow`, written here).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import torch
import torch.nn.functional as F

from comfy_core.models.resident import ResidentModel, load_exact

PREFIXES = ("feature_encoder.", "context_encoder.", "update_block.")
MIN_SIDE = 128  # RAFT's four-level correlation pyramid on 1/8-size features
SMALL_MARKER = "context_encoder.layer1.0.convnormrelu3.0.weight"  # raft_small's bottleneck blocks


class OpticalFlowWeightsError(ValueError):
    """A file that is not a torchvision RAFT state dict."""


def is_raft(names: Any) -> bool:
    return all(any(n.startswith(p) for n in names) for p in PREFIXES)


def raft_kind(names: Any) -> str:
    return "raft_small" if SMALL_MARKER in names else "raft_large"


def _resize(image: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """`[C, H, W]` -> `[C, *size]` (bilinear, unaligned corners); the same tensor when already so."""
    if tuple(image.shape[-2:]) == tuple(size):
        return image
    return F.interpolate(image[None], size=size, mode="bilinear", align_corners=False)[0]


class OpticalFlowModel(ResidentModel):
    """ComfyUI's OPTICAL_FLOW: a torchvision RAFT network and where it runs."""

    @property
    def kind(self) -> str:
        return raft_kind(self.model.state_dict())

    @torch.no_grad()
    def flow(self, from_image: torch.Tensor, to_image: torch.Tensor) -> torch.Tensor:
        """Frames `[3, H, W]` in 0..1 -> the flow `[2, H, W]` from `from_image` to `to_image`."""
        if from_image.shape != to_image.shape or from_image.ndim != 3:
            raise ValueError(f"optical flow: two frames [3, H, W] of one size, got {tuple(from_image.shape)} "
                             f"and {tuple(to_image.shape)}")
        h, w = from_image.shape[-2:]
        size = ((h // 8) * 8, (w // 8) * 8)
        if min(size) < MIN_SIDE:
            raise ValueError(f"optical flow: frames of {w}x{h} are smaller than RAFT's {MIN_SIDE}x{MIN_SIDE} "
                             f"(its correlation pyramid)")
        device = next(self.model.parameters()).device
        a, b = (_resize(img.to(device, torch.float32), size)[None] * 2 - 1 for img in (from_image, to_image))
        flows = self.model(a, b)
        return _resize(flows[-1][0], (h, w))


def load_optical_flow(path: str | Path | Mapping[str, torch.Tensor], *, load_device: torch.device | str = "cpu",
                      offload_device: torch.device | str = "cpu") -> OpticalFlowModel:
    """A torchvision RAFT state dict (file or mapping) -> `OpticalFlowModel` in float32."""
    from torchvision.models.optical_flow import raft_large, raft_small

    if isinstance(path, Mapping):
        state, name = dict(path), "<memory>"
    else:
        from comfy_core.checkpoint.errors import CheckpointError
        from comfy_core.checkpoint.reader import load_tensor_file

        name = Path(path).name
        try:
            state, _ = load_tensor_file(Path(path))
        except CheckpointError as exc:
            raise OpticalFlowWeightsError(f"{name}: not a readable weights file ({exc})") from exc
    if not is_raft(state):
        raise OpticalFlowWeightsError(
            f"{name}: unrecognized optical flow model format: expected a torchvision RAFT state dict with "
            f"'feature_encoder.', 'context_encoder.' and 'update_block.' prefixes")
    build = raft_small if raft_kind(state) == "raft_small" else raft_large
    network = build(weights=None, progress=False)
    optional = {k for k in network.state_dict() if k.endswith("num_batches_tracked")}
    network = load_exact(network, {k: v.float() if v.is_floating_point() else v for k, v in state.items()},
                         what=f"{name} (torchvision {build.__name__})", error=OpticalFlowWeightsError,
                         optional=optional)
    return OpticalFlowModel(network.float(), load_device=load_device, offload_device=offload_device)
