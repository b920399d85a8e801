"""Depth Anything 3 (Lin et al. 2025, "Depth Anything 3: Recovering the Visual Space from Any
Views"), the monocular variants, in the key layout ComfyUI's `comfy/ldm/depth_anything_3/model.py`
and `dpt.py` load (`geometry_estimation/depth_anything_3_mono_large.safetensors`); written here
from those files' behaviour and the DPT paper (Ranftl et al. 2021, "Vision Transformers for Dense
Prediction").

- `backbone.*`: a plain DINOv2 (`models/dinov2.py`; DA3's files hold no `mask_token`). The
  tokens after four blocks (`out_layers`: ViT-L 4 / 11 / 17 / 23, ViT-S / B 5 / 7 / 9 / 11,
  ViT-g 19 / 27 / 33 / 39) each through the final LayerNorm, class token dropped.
- `head.*`, the DPT head (ComfyUI's `DPT`, Mono-Large / Metric-Large): per level a 1x1 projection
  (`projects.i`) and a resize (`resize_layers`: 4x and 2x transposed convs, identity, a stride-2
  3x3 conv); `scratch.layerN_rn` 3x3 convs to `features`; fusion `refinenet4 .. 1` (pre-activation
  residual units `resConfUnit1/2`, bilinear 2x or to the next level's size with
  align_corners, a 1x1 `out_conv`); `output_conv1` (3x3 to features / 2), bilinear to the patch
  grid x 14, `output_conv2` (3x3 to 32, ReLU, 1x1 to `output_dim`): depth `exp`, a confidence
  channel (if any) `exp + 1`; the sky head `sky_output_conv2` (same shape, 1 channel) through ReLU.

Detected from the weights (`DA3Config.detect_from_weights`). The multi-view variants (Small /
Base / Giant: `head.scratch.*_aux` DualDPT, `cam_enc` / `cam_dec`, QK-norm, RoPE and alternating
attention in the backbone) are told apart and refused with a clear error: not built here yet.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.models.dinov2 import PATCH, Dinov2Config, Dinov2Model
from comfy_core.models.resident import load_exact

IMAGE_MEAN = (0.485, 0.456, 0.406)
IMAGE_STD = (0.229, 0.224, 0.225)
HEAD_HIDDEN = 32  # output_conv2 / sky_output_conv2's middle width
# ComfyUI's (upstream's) tapped blocks per backbone depth.
OUT_LAYERS = {12: (5, 7, 9, 11), 24: (4, 11, 17, 23), 40: (19, 27, 33, 39)}
PREFIXES = ("model.diffusion_model.", "diffusion_model.", "model.")
MULTIVIEW_MARKS = ("head.scratch.refinenet1_aux.", "cam_dec.", "cam_enc.", "backbone.embeddings.camera_token")


class DA3WeightsError(ValueError):
    """A file that is not a Depth Anything 3 model this engine builds (names what is wrong)."""


def out_layers_for(depth: int) -> tuple[int, ...]:
    """The four tapped blocks: ComfyUI's table, else spread evenly over the blocks (tiny test nets)."""
    if depth in OUT_LAYERS:
        return OUT_LAYERS[depth]
    return tuple(round(i * (depth - 1) / 3) for i in range(4))


@dataclass(frozen=True)
class DA3Config:
    backbone: Dinov2Config
    out_layers: tuple[int, ...]
    features: int
    out_channels: tuple[int, int, int, int]
    output_dim: int = 1  # 1: depth; 2: depth + confidence
    sky: bool = True

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any]) -> "DA3Config":
        """Widths from names and shapes (keys without a wrapper prefix)."""
        backbone = Dinov2Config.detect_from_weights(tensors, "backbone.")
        return cls(
            backbone=backbone,
            out_layers=out_layers_for(backbone.num_layers),
            features=int(tensors["head.scratch.layer1_rn.weight"].shape[0]),
            out_channels=tuple(int(tensors[f"head.projects.{i}.weight"].shape[0]) for i in range(4)),  # type: ignore[arg-type]
            output_dim=int(tensors["head.scratch.output_conv2.2.weight"].shape[0]),
            sky="head.scratch.sky_output_conv2.0.weight" in tensors)


# -- the DPT head ----------------------------------------------------------------------------------

class ResidualConvUnit(nn.Module):
    """`x + conv2(relu(conv1(relu(x))))` (DPT's pre-activation residual unit)."""

    def __init__(self, features: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(features, features, 3, padding=1)
        self.conv2 = nn.Conv2d(features, features, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2(F.relu(self.conv1(F.relu(x)))) + x


class FusionBlock(nn.Module):
    """`out_conv(up(resConfUnit2(x + resConfUnit1(skip))))`; the deepest block has no skip."""

    def __init__(self, features: int, residual: bool = True) -> None:
        super().__init__()
        if residual:
            self.resConfUnit1 = ResidualConvUnit(features)
        self.resConfUnit2 = ResidualConvUnit(features)
        self.out_conv = nn.Conv2d(features, features, 1)

    def forward(self, x: torch.Tensor, skip: torch.Tensor | None = None,
                size: Sequence[int] | None = None) -> torch.Tensor:
        if skip is not None:
            x = x + self.resConfUnit1(skip)
        x = self.resConfUnit2(x)
        if size is None:
            x = F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=True)
        else:
            x = F.interpolate(x, size=tuple(size), mode="bilinear", align_corners=True)
        return self.out_conv(x)


def _head_conv2(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, HEAD_HIDDEN, 3, padding=1), nn.ReLU(), nn.Conv2d(HEAD_HIDDEN, c_out, 1))


class _Scratch(nn.Module):
    def __init__(self, config: DA3Config) -> None:
        super().__init__()
        f = config.features
        for i, channels in enumerate(config.out_channels):
            setattr(self, f"layer{i + 1}_rn", nn.Conv2d(channels, f, 3, padding=1, bias=False))
        for i in range(1, 5):
            setattr(self, f"refinenet{i}", FusionBlock(f, residual=i != 4))
        self.output_conv1 = nn.Conv2d(f, f // 2, 3, padding=1)
        self.output_conv2 = _head_conv2(f // 2, config.output_dim)
        if config.sky:
            self.sky_output_conv2 = _head_conv2(f // 2, 1)


class DPTHead(nn.Module):
    def __init__(self, config: DA3Config) -> None:
        super().__init__()
        dim, ch = config.backbone.hidden_size, config.out_channels
        self.config = config
        self.projects = nn.ModuleList([nn.Conv2d(dim, c, 1) for c in ch])
        self.resize_layers = nn.ModuleList([
            nn.ConvTranspose2d(ch[0], ch[0], 4, stride=4), nn.ConvTranspose2d(ch[1], ch[1], 2, stride=2),
            nn.Identity(), nn.Conv2d(ch[3], ch[3], 3, stride=2, padding=1)])
        self.scratch = _Scratch(config)

    def forward(self, tokens: Sequence[torch.Tensor], rows: int, cols: int) -> dict[str, torch.Tensor]:
        """`tokens`: four [B, rows*cols, D] normed patch-token maps -> depth [B, 14 rows, 14 cols]
        (+ `depth_conf`, `sky`)."""
        s = self.scratch
        levels = []
        for i, t in enumerate(tokens):
            x = t.transpose(1, 2).reshape(t.shape[0], t.shape[2], rows, cols)  # [B, D, rows, cols]
            levels.append(self.resize_layers[i](self.projects[i](x)))
        l1, l2, l3, l4 = (getattr(s, f"layer{i + 1}_rn")(x) for i, x in enumerate(levels))
        out = s.refinenet4(l4, size=l3.shape[-2:])
        out = s.refinenet3(out, l3, size=l2.shape[-2:])
        out = s.refinenet2(out, l2, size=l1.shape[-2:])
        out = s.refinenet1(out, l1)
        fused = F.interpolate(s.output_conv1(out), size=(rows * PATCH, cols * PATCH), mode="bilinear",
                              align_corners=True)
        logits = s.output_conv2(fused)  # [B, output_dim, H, W]
        result = {"depth": torch.exp(logits[:, 0])}
        if self.config.output_dim > 1:
            result["depth_conf"] = torch.exp(logits[:, -1]) + 1
        if self.config.sky:
            result["sky"] = F.relu(s.sky_output_conv2(fused))[:, 0]
        return result


class DepthAnything3(nn.Module):
    """The monocular DA3 network: `forward(pixels)` on ImageNet-normalised [B, 3, H, W] (H, W
    multiples of 14) -> {depth [B, H, W], sky [B, H, W] (Mono / Metric), depth_conf}."""

    def __init__(self, config: DA3Config) -> None:
        super().__init__()
        self.config = config
        self.backbone = Dinov2Model(config.backbone)
        self.head = DPTHead(config)

    def forward(self, pixels: torch.Tensor) -> dict[str, torch.Tensor]:
        h, w = pixels.shape[-2:]
        if h % PATCH or w % PATCH:
            raise ValueError(f"DA3 input height and width must be multiples of {PATCH}, got {(h, w)}")
        feats = self.backbone.intermediate_layers(pixels, self.config.out_layers, apply_norm=True)
        return self.head([patch for patch, _cls in feats], h // PATCH, w // PATCH)


# -- loading ---------------------------------------------------------------------------------------

def strip_prefix(state: Mapping[str, Any]) -> dict[str, Any]:
    """The state dict without a wrapper prefix (`model.diffusion_model.` as a saved diffusion model
    holds it, or `model.`) when every backbone key carries it."""
    for prefix in PREFIXES:
        if any(k.startswith(prefix + "backbone.") for k in state):
            return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    return dict(state)


def detect_config(tensors: Mapping[str, Any]) -> DA3Config:
    if "backbone.embeddings.cls_token" not in tensors or "head.projects.0.weight" not in tensors:
        raise DA3WeightsError("not a Depth Anything 3 model: no `backbone.embeddings` DINOv2 with a `head.projects` "
                              "DPT head")
    multiview = [m for m in MULTIVIEW_MARKS if any(k.startswith(m) for k in tensors)]
    if multiview or any(".attention.q_norm." in k for k in tensors):
        raise DA3WeightsError("a multi-view Depth Anything 3 model (Small / Base / Giant: DualDPT head, camera "
                              f"tokens or QK-norm, {multiview[:2]}); only the Mono / Metric models are supported")
    return DA3Config.detect_from_weights(tensors)


def network_from_state_dict(state: Mapping[str, torch.Tensor], name: str = "state dict",
                            dtype: torch.dtype = torch.float32) -> DepthAnything3:
    """The network of a DA3 state dict, weights in `dtype`, in eval mode on the CPU. Every tensor
    the network needs must be in the file with its shape (DINOv2's `mask_token`, a training
    parameter DA3 files drop, excepted)."""
    tensors = strip_prefix(state)
    try:
        config = detect_config(tensors)
    except (KeyError, ValueError, IndexError) as exc:
        if isinstance(exc, DA3WeightsError):
            raise DA3WeightsError(f"{name}: {exc}") from None
        raise DA3WeightsError(f"{name}: not a Depth Anything 3 file ({type(exc).__name__}: {exc})") from None
    return load_exact(DepthAnything3(config), tensors, what=f"{name}: Depth Anything 3", error=DA3WeightsError,
                      optional={"backbone.embeddings.mask_token"}, dtype=dtype)
