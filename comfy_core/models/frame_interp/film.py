"""FILM (Reda et al. 2022, "FILM: Frame Interpolation for Large Motion"), in the key layout ComfyUI's
`comfy_extras/frame_interpolation_models/film_net.py` loads (`frame_interpolation/film_net_fp16.safetensors`);
written here from the paper and that file's behaviour.

- Convolutions (`FilmConv2d`): odd kernels padded `k // 2`; even kernels (the fusion's 2x2) padded
  one pixel right and bottom only; LeakyReLU 0.2 unless the last of a flow estimator or the
  fusion's 2x2.
- Image pyramid: 7 levels, each the previous 2x2-average-pooled (sizes floored).
- Features (`extract.extract_sublevels.convs.i`, two 3x3 convs of `filters << i` each): run on
  every pyramid level for up to 4 sub-levels (2x2 average pooling between); feature level `i`
  concatenates sub-level 0 of level i, sub-level 1 of level i - 1, ... (as far as both exist).
- Flow (`predict_flow`), coarse to fine, per direction: the deepest level by the shared predictor
  (`_predictor`, the deepest-trained one) from (features a, features b); each finer level: the
  flow so far upsampled (bilinear, align_corners off) and doubled, b's features backward-warped by
  it, a residual from (a, warped b) added -- by the shared predictor down to level 3, then by
  `_predictors.0 / 1 / 2` for levels 2 / 1 / 0. A predictor: 3x3 convs, a 1x1 to half the width,
  a 1x1 to the 2 flow channels (x then y, in pixels). The residuals are summed back up the same way.
- Synthesis at time t (of the 5 finest levels): image and features of frame 0 warped by t x the
  1 -> 0 flow, of frame 1 by (1 - t) x the 0 -> 1 flow, concatenated with both scaled flows; the
  fusion decoder (`fuse.convs`, from the deepest: upsample nearest, 2x2 conv, concatenate the
  level, two 3x3 convs) and a 1x1 `fuse.output_conv` to RGB (not clamped).
- Backward warp: `out(y, x) = image(y + flow_y, x + flow_x)`, bilinear, borders repeated
  (grid_sample, align_corners off, pixel centres at `(2p + 1) / size - 1`), in float32.

Widths (filters, sub-levels, each predictor's convs and width, the fusion's widths) are read from
the weights (`FilmConfig.detect_from_weights`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

DETECT_KEY = "extract.extract_sublevels.convs.0.0.conv.weight"  # ComfyUI's marker for a FILM file
PYRAMID_LEVELS = 7
FUSION_LEVELS = 5


@dataclass(frozen=True)
class FilmConfig:
    filters: int = 64
    sub_levels: int = 4
    flow_convs: tuple[int, ...] = (3, 3, 3, 3)
    flow_filters: tuple[int, ...] = (32, 64, 128, 256)
    fusion_filters: tuple[int, ...] = (512, 256, 128, 64)  # fuse.convs.k's widths, deepest first
    pyramid_levels: int = PYRAMID_LEVELS
    fusion_levels: int = FUSION_LEVELS

    def feature_width(self, level: int) -> int:
        return sum(self.filters << j for j in range(min(level, self.sub_levels - 1) + 1))

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, torch.Tensor]) -> "FilmConfig":
        filters = int(tensors[DETECT_KEY].shape[0])
        sub_levels = 0
        while f"extract.extract_sublevels.convs.{sub_levels}.0.conv.weight" in tensors:
            sub_levels += 1

        def predictor(prefix: str) -> tuple[int, int]:
            n = 0
            while f"{prefix}._convs.{n}.conv.weight" in tensors:
                n += 1
            if n < 3:
                raise KeyError(f"{prefix}._convs.0.conv.weight")
            return n - 2, int(tensors[f"{prefix}._convs.0.conv.weight"].shape[0])

        specialized = []
        while f"predict_flow._predictors.{len(specialized)}._convs.0.conv.weight" in tensors:
            specialized.append(predictor(f"predict_flow._predictors.{len(specialized)}"))
        finest_first = specialized[::-1] + [predictor("predict_flow._predictor")]
        fusion = []
        while f"fuse.convs.{len(fusion)}.0.conv.weight" in tensors:
            fusion.append(int(tensors[f"fuse.convs.{len(fusion)}.0.conv.weight"].shape[0]))
        return cls(filters=filters, sub_levels=sub_levels, flow_convs=tuple(c for c, _ in finest_first),
                   flow_filters=tuple(f for _, f in finest_first), fusion_filters=tuple(fusion))


class FilmConv2d(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel: int, activation: bool = True) -> None:
        super().__init__()
        self.even = kernel % 2 == 0
        self.activation = activation
        self.conv = nn.Conv2d(in_channels, out_channels, kernel, padding=0 if self.even else kernel // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.even:
            x = F.pad(x, (0, 1, 0, 1))
        x = self.conv(x)
        return F.leaky_relu(x, 0.2) if self.activation else x


def backward_warp(image: torch.Tensor, flow: torch.Tensor) -> torch.Tensor:
    """`image` [B, C, H, W] sampled at each pixel plus `flow` [B, 2, H, W] (x, y in pixels),
    bilinear, borders repeated (module docstring)."""
    b, _, h, w = flow.shape
    xs = torch.linspace(-(1 - 1 / w), 1 - 1 / w, w, device=flow.device, dtype=torch.float32)
    ys = torch.linspace(-(1 - 1 / h), 1 - 1 / h, h, device=flow.device, dtype=torch.float32)
    gx = xs.view(1, 1, w) + flow[:, 0].float() / (w * 0.5)
    gy = ys.view(1, h, 1) + flow[:, 1].float() / (h * 0.5)
    grid = torch.stack([gx, gy], dim=3)
    out = F.grid_sample(image.float(), grid, mode="bilinear", padding_mode="border", align_corners=False)
    return out.to(image.dtype)


class SubTreeExtractor(nn.Module):
    def __init__(self, filters: int, sub_levels: int) -> None:
        super().__init__()
        layers, width = [], 3
        for i in range(sub_levels):
            layers.append(nn.Sequential(FilmConv2d(width, filters << i, 3), FilmConv2d(filters << i, filters << i, 3)))
            width = filters << i
        self.convs = nn.ModuleList(layers)

    def forward(self, image: torch.Tensor, n: int) -> list[torch.Tensor]:
        """The first `n` sub-levels of `image`, each after 2x2 average pooling of the previous."""
        out, head = [], image
        for i in range(n):
            if i:
                head = F.avg_pool2d(head, 2, 2)
            head = self.convs[i](head)
            out.append(head)
        return out


class FeatureExtractor(nn.Module):
    def __init__(self, filters: int, sub_levels: int) -> None:
        super().__init__()
        self.sub_levels = sub_levels
        self.extract_sublevels = SubTreeExtractor(filters, sub_levels)

    def forward(self, pyramid: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        levels = len(pyramid)
        subs = [self.extract_sublevels(pyramid[i], min(levels - i, self.sub_levels)) for i in range(levels)]
        return [torch.cat([subs[i - j][j] for j in range(min(i, self.sub_levels - 1) + 1)], dim=1)
                for i in range(levels)]


class FlowEstimator(nn.Module):
    def __init__(self, in_channels: int, convs: int, filters: int) -> None:
        super().__init__()
        layers = []
        for _ in range(convs):
            layers.append(FilmConv2d(in_channels, filters, 3))
            in_channels = filters
        layers += [FilmConv2d(filters, filters // 2, 1), FilmConv2d(filters // 2, 2, 1, activation=False)]
        self._convs = nn.ModuleList(layers)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        x = torch.cat([a, b], dim=1)
        for conv in self._convs:
            x = conv(x)
        return x


class PyramidFlowEstimator(nn.Module):
    def __init__(self, config: FilmConfig) -> None:
        super().__init__()
        n = len(config.flow_filters)
        make = [FlowEstimator(2 * config.feature_width(i), config.flow_convs[i], config.flow_filters[i]) for i in range(n)]
        self._predictor = make[-1]  # the deepest specialised one, shared by every deeper level
        self._predictors = nn.ModuleList(make[:-1][::-1])  # levels n-2 .. 0

    def predictor_for(self, level: int) -> FlowEstimator:
        specialised = len(self._predictors)
        return self._predictors[specialised - 1 - level] if level < specialised else self._predictor

    def forward(self, fa: Sequence[torch.Tensor], fb: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The a -> b flow at every level, finest first: residuals summed coarse to fine."""
        levels = len(fa)
        flow = self._predictor(fa[-1], fb[-1])
        flows = [flow]
        for i in range(levels - 2, -1, -1):
            up = 2 * F.interpolate(flow, size=fa[i].shape[2:4], mode="bilinear")
            flow = up + self.predictor_for(i)(fa[i], backward_warp(fb[i], up))
            flows.append(flow)
        return flows[::-1]


class Fusion(nn.Module):
    def __init__(self, config: FilmConfig) -> None:
        super().__init__()
        n = len(config.fusion_filters)

        def level_width(level: int) -> int:  # warped image + features, both frames, plus both flows
            return 2 * (3 + config.feature_width(level)) + 4

        self.convs = nn.ModuleList()
        below = level_width(n)  # the deepest fused level's channels
        for k, width in enumerate(config.fusion_filters):
            level = n - 1 - k
            self.convs.append(nn.ModuleList([FilmConv2d(below, width, 2, activation=False),
                                             FilmConv2d(level_width(level) + width, width, 3),
                                             FilmConv2d(width, width, 3)]))
            below = width
        self.output_conv = nn.Conv2d(config.fusion_filters[-1], 3, 1)

    def forward(self, pyramid: Sequence[torch.Tensor]) -> torch.Tensor:
        x = pyramid[-1]
        for k, (up, conv_a, conv_b) in enumerate(self.convs):
            level = len(self.convs) - 1 - k
            x = up(F.interpolate(x, size=pyramid[level].shape[2:4], mode="nearest"))
            x = conv_b(conv_a(torch.cat([pyramid[level], x], dim=1)))
        return self.output_conv(x)


class FILMNet(nn.Module):
    """`extract_features(frame [1, 3, H, W])` -> (image pyramid, feature pyramid), cacheable per
    frame; `interpolate(f0, f1, times)` -> [len(times), 3, H, W], the flows computed once."""

    pad_align = 1
    min_size = 2 ** (PYRAMID_LEVELS - 1)  # the smallest side the pyramid pools to one pixel (the caller pads)

    def __init__(self, config: FilmConfig) -> None:
        super().__init__()
        self.config = config
        self.extract = FeatureExtractor(config.filters, config.sub_levels)
        self.predict_flow = PyramidFlowEstimator(config)
        self.fuse = Fusion(config)

    def extract_features(self, image: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        pyramid = [image]
        for _ in range(1, self.config.pyramid_levels):
            pyramid.append(F.avg_pool2d(pyramid[-1], 2, 2))
        return pyramid, self.extract(pyramid)

    def interpolate(self, features0, features1, times: Sequence[float]) -> torch.Tensor:
        (images0, feats0), (images1, feats1) = features0, features1
        n = self.config.fusion_levels
        flow01 = self.predict_flow(feats0, feats1)[:n]
        flow10 = self.predict_flow(feats1, feats0)[:n]
        source0 = [torch.cat([i, f], dim=1) for i, f in zip(images0[:n], feats0[:n])]
        source1 = [torch.cat([i, f], dim=1) for i, f in zip(images1[:n], feats1[:n])]
        out = []
        for t in times:
            t = torch.tensor([t], device=flow01[0].device, dtype=flow01[0].dtype)  # in the model's dtype, as ComfyUI
            aligned = []
            for level in range(n):
                back = flow10[level] * t  # where frame 0's content comes from, seen from time t
                fwd = flow01[level] * (1 - t)
                aligned.append(torch.cat([backward_warp(source0[level], back), backward_warp(source1[level], fwd),
                                          back, fwd], dim=1))
            out.append(self.fuse(aligned))
        return torch.cat(out, dim=0)

    def forward(self, img0: torch.Tensor, img1: torch.Tensor, times: Sequence[float]) -> torch.Tensor:
        return self.interpolate(self.extract_features(img0), self.extract_features(img1), times)
