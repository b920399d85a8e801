"""SDPose's network: SD 2.x's UNet plus a heatmap head on one of its decoder features, and the
decoding of the head's heatmaps into keypoints.

SDPose (Liang et al. 2025, "SDPose: Exploiting Diffusion Priors for Out-of-Domain and Robust Pose
Estimation") runs an SD 2.x UNet for one denoising step and reads the 640-channel decoder feature
(the last output-block input of that width, at the latent's full resolution); a heatmap head --
MMPose's `HeatmapHead` (Xiao et al. 2018, "Simple Baselines for Human Pose Estimation"): transposed
convolutions, then 1x1 convolutions, each followed by instance norm and SiLU, then a projection to
one heatmap per keypoint -- turns it into 133 COCO-WholeBody heatmaps at a quarter of the 768x1024
model input. Today's ComfyUI keeps the head inside its `UNetModel` as `heatmap_head` (detected by
`heatmap_head.conv_layers.0.weight`, `comfy/model_detection.py`) with the fixed input size
768x1024 (width x height) and heatmap scale 4; the widths, depths and keypoint count are read from
the weights here.

The decoding is MMPose's UDP codec (Huang et al. 2020, "The Devil is in the Details: Delving into
Unbiased Data Processing for Human Pose Estimation") with DARK's refinement (Zhang et al. 2020,
"Distribution-Aware Coordinate Representation for Human Pose Estimation"): the argmax per heatmap
(its value is the score; a score <= 0 marks the keypoint missing, -1), the heatmap blurred by a
Gaussian (sigma 2, on a 5-pixel zero border, rescaled to keep its maximum), clipped to
[1e-3, 50] and taken to the log, then one Newton step from the argmax with the central-difference
gradient and Hessian there, and the heatmap-grid position scaled to the input by
(input - 1) / (heatmap - 1) per axis, as ComfyUI's `HeatmapHead.forward` does.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import torch
from torch import nn

from comfy_core.models.unet import UNetConfig, UNetConfigError, UNetModel
from comfy_core.models.unet_blocks import operations_or_default

HEAD = "heatmap_head."
INPUT_SIZE = (768, 1024)  # (width, height) of the model input; ComfyUI's fixed HeatmapHead default
HEATMAP_SCALE = 4
BLUR_SIGMA = 2.0
BLUR_BORDER = 5  # (kernel - 1) // 2 for MMPose's 11-pixel kernel
LOG_CLIP = (1e-3, 50.0)
_DECONV_PADDING = {4: (1, 0), 3: (1, 1), 2: (0, 0)}  # kernel -> (padding, output_padding), stride 2


@dataclass(frozen=True)
class SDPoseConfig(UNetConfig):
    """The UNet's config plus the head's: input width, (out channels, kernel) per transposed
    convolution and per convolution, keypoints and final kernel."""

    head_in_channels: int = 640
    head_deconv: tuple[tuple[int, int], ...] = ((640, 4),)
    head_conv: tuple[tuple[int, int], ...] = ((640, 1),)
    keypoints: int = 133
    final_kernel: int = 1

    @property
    def heatmap_size(self) -> tuple[int, int]:
        """(width, height) of the heatmaps for the fixed model input."""
        return INPUT_SIZE[0] // HEATMAP_SCALE, INPUT_SIZE[1] // HEATMAP_SCALE

    @classmethod
    def detect(cls, tensors: Mapping[str, Any], prefix: str) -> "SDPoseConfig":
        """The UNet's structure and the head's from names and shapes."""
        unet = UNetConfig.detect_from_weights(tensors, prefix)
        head = prefix + HEAD

        def shape(name: str) -> tuple[int, ...]:
            if head + name not in tensors:
                raise UNetConfigError(f"SDPose heatmap head: {head + name} is missing")
            return tuple(tensors[head + name].shape)

        deconv: list[tuple[int, int]] = []
        while head + f"deconv_layers.{3 * len(deconv)}.weight" in tensors:
            w = shape(f"deconv_layers.{3 * len(deconv)}.weight")  # [in, out, k, k]
            if w[2] not in _DECONV_PADDING:
                raise UNetConfigError(f"SDPose heatmap head: transposed-convolution kernel {w[2]} is not 2, 3 or 4")
            deconv.append((w[1], w[2]))
        conv: list[tuple[int, int]] = []
        while head + f"conv_layers.{3 * len(conv)}.weight" in tensors:
            w = shape(f"conv_layers.{3 * len(conv)}.weight")  # [out, in, k, k]
            conv.append((w[0], w[2]))
        final = shape("final_layer.weight")  # [keypoints, in, k, k]
        if deconv:
            in_channels = shape("deconv_layers.0.weight")[0]
        elif conv:
            in_channels = shape("conv_layers.0.weight")[1]
        else:
            in_channels = final[1]
        return cls(**dataclasses.asdict(unet), head_in_channels=in_channels, head_deconv=tuple(deconv),
                   head_conv=tuple(conv), keypoints=final[0], final_kernel=final[2])


class HeatmapHead(nn.Module):
    """MMPose's `HeatmapHead` as ComfyUI builds it: `deconv_layers` (ConvTranspose2d stride 2 without
    bias, InstanceNorm2d, SiLU) per transposed convolution, `conv_layers` (Conv2d, InstanceNorm2d,
    SiLU) per convolution, `final_layer` (Conv2d to one map per keypoint). `heatmaps(x)`:
    `[B, in, h, w] -> [B, K, 2h, 2w]` (one transposed convolution); calling the head decodes them
    (`decode_heatmaps`), as ComfyUI's `heatmap_head(feature)` returns (keypoints, scores) lists."""

    def __init__(self, config: SDPoseConfig, operations: Any = None, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        layer = {"dtype": dtype, "device": device}
        self.in_channels = config.head_in_channels
        self.heatmap_size = config.heatmap_size
        size, heat = np.array(INPUT_SIZE), np.array(self.heatmap_size)
        self.scale_factor = ((size - 1) / (heat - 1)).astype(np.float32)  # (x, y): heatmap grid -> input pixels
        channels = config.head_in_channels
        deconv: list[nn.Module] = []
        for out, kernel in config.head_deconv:
            padding, output_padding = _DECONV_PADDING[kernel]
            deconv += [ops.ConvTranspose2d(channels, out, kernel, stride=2, padding=padding,
                                           output_padding=output_padding, bias=False, **layer),
                       nn.InstanceNorm2d(out, **layer), nn.SiLU()]
            channels = out
        self.deconv_layers = nn.Sequential(*deconv) if deconv else nn.Identity()
        conv: list[nn.Module] = []
        for out, kernel in config.head_conv:
            conv += [ops.Conv2d(channels, out, kernel, stride=1, padding=(kernel - 1) // 2, **layer),
                     nn.InstanceNorm2d(out, **layer), nn.SiLU()]
            channels = out
        self.conv_layers = nn.Sequential(*conv) if conv else nn.Identity()
        self.final_layer = ops.Conv2d(channels, config.keypoints, config.final_kernel,
                                      padding=config.final_kernel // 2, **layer)

    def heatmaps(self, x: torch.Tensor) -> torch.Tensor:
        """`[B, in, h, w]` feature -> `[B, K, H, W]` heatmaps, on the feature's device; the weights
        are cast to it (float32 on the CPU, where half-precision kernels are missing or slow), as
        ComfyUI's cast operations run a layer in its input's dtype."""
        import torch.nn.functional as F

        dtype = torch.float32 if x.device.type == "cpu" else x.dtype
        x = x.to(dtype)

        def cast(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device=x.device, dtype=dtype)

        with torch.no_grad():
            for layers, transposed in ((self.deconv_layers, True), (self.conv_layers, False)):
                if isinstance(layers, nn.Identity):
                    continue
                for index in range(0, len(layers), 3):
                    conv = layers[index]
                    if transposed:
                        x = F.conv_transpose2d(x, cast(conv.weight), cast(conv.bias), stride=conv.stride,
                                               padding=conv.padding, output_padding=conv.output_padding)
                    else:
                        x = F.conv2d(x, cast(conv.weight), cast(conv.bias), stride=conv.stride, padding=conv.padding)
                    x = F.silu(F.instance_norm(x, eps=layers[index + 1].eps))
            final = self.final_layer
            return F.conv2d(x, cast(final.weight), cast(final.bias), padding=final.padding)

    def forward(self, x: torch.Tensor) -> tuple[list[np.ndarray], list[np.ndarray]]:
        return decode_heatmaps(self.heatmaps(x).float().cpu().numpy(), self.scale_factor)


def _blur_keep_max(heatmap: np.ndarray) -> np.ndarray:
    """DARK's modulation: Gaussian blur over a zero border, rescaled to the original maximum."""
    from scipy.ndimage import gaussian_filter

    h, w = heatmap.shape
    padded = np.zeros((h + 2 * BLUR_BORDER, w + 2 * BLUR_BORDER), dtype=np.float32)
    padded[BLUR_BORDER:-BLUR_BORDER, BLUR_BORDER:-BLUR_BORDER] = heatmap
    blurred = gaussian_filter(padded, sigma=BLUR_SIGMA)[BLUR_BORDER:-BLUR_BORDER, BLUR_BORDER:-BLUR_BORDER]
    peak = blurred.max()
    if peak > 0:
        blurred = blurred * (heatmap.max() / peak)
    return blurred.astype(np.float32)


def decode_heatmaps(heatmaps: np.ndarray, scale_factor: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """`[B, K, H, W]` heatmaps -> per image `(keypoints [K, 2] (x, y) in input pixels, scores [K])`;
    a keypoint whose peak is <= 0 is (-1, -1). See the module docstring (UDP + DARK)."""
    batch, count, height, width = heatmaps.shape
    all_points: list[np.ndarray] = []
    all_scores: list[np.ndarray] = []
    for maps in heatmaps:
        flat = maps.reshape(count, -1)
        peak = flat.argmax(axis=1)
        scores = flat[np.arange(count), peak].astype(np.float32)
        ys, xs = np.divmod(peak, width)
        points = np.stack([xs, ys], axis=-1).astype(np.float32)  # [K, 2] heatmap grid
        missing = scores <= 0
        log_maps = np.stack([_blur_keep_max(m) for m in maps])
        log_maps = np.log(np.clip(log_maps, *LOG_CLIP))
        padded = np.pad(log_maps, ((0, 0), (1, 1), (1, 1)), mode="edge")  # [K, H + 2, W + 2]
        k, cy, cx = np.arange(count), ys + 1, xs + 1

        def at(dy: int, dx: int) -> np.ndarray:
            return padded[k, cy + dy, cx + dx]

        centre = at(0, 0)
        dx = 0.5 * (at(0, 1) - at(0, -1))
        dy = 0.5 * (at(1, 0) - at(-1, 0))
        dxx = at(0, 1) - 2 * centre + at(0, -1)
        dyy = at(1, 0) - 2 * centre + at(-1, 0)
        dxy = 0.5 * (at(1, 1) - at(0, 1) - at(1, 0) + 2 * centre - at(0, -1) - at(-1, 0) + at(-1, -1))
        hessian = np.stack([np.stack([dxx, dxy], -1), np.stack([dxy, dyy], -1)], -2)  # [K, 2, 2]
        hessian = hessian + np.finfo(np.float32).eps * np.eye(2)
        found = ~missing
        if found.any():
            gradient = np.stack([dx, dy], -1)[found][..., None]  # [k, 2, 1]
            step = np.linalg.inv(hessian[found]) @ gradient
            points[found] -= step[..., 0].astype(np.float32)
        points = points * scale_factor
        points[missing] = -1
        all_points.append(points.astype(np.float32))
        all_scores.append(scores)
    return all_points, all_scores


class SDPoseUNet(UNetModel):
    """SD 2.x's UNet with `heatmap_head` (ComfyUI's `UNetModel(heatmap_head=True)`): the UNet runs
    as ever; the head is applied by its caller to the feature an `output_block_patch` captures."""

    def __init__(self, config: SDPoseConfig, *, operations: Any = None, dtype: Any = None, device: Any = None) -> None:
        super().__init__(config, operations=operations, dtype=dtype, device=device)
        self.heatmap_head = HeatmapHead(config, operations=operations, dtype=dtype, device=device)
