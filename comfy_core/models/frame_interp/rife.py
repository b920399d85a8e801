"""RIFE's IFNet (Huang et al. 2022, "Real-Time Intermediate Flow Estimation for Video Frame
Interpolation"), the v4.2x layout ComfyUI's `comfy_extras/frame_interpolation_models/ifnet.py` loads
(`frame_interpolation/rife_v4.25*.safetensors`, `rife_v4.26*`); written here from the paper and
that file's behaviour.

- `encode` (the head): 3x3 stride-2 conv to 16, two 3x3 convs, LeakyReLU 0.2 after each, a 4x4
  stride-2 transposed conv to `head` channels: per-frame features at full size (cacheable).
- Five `blocks` at scales 16, 8, 4, 2, 1, each on its input resized by 1 / scale (bilinear,
  align_corners off, ComfyUI's scale-factor sampling): two stride-2 3x3 convs (LeakyReLU) to `c`,
  eight residual convs `LeakyReLU(x + beta * conv(x))`, a 4x4 stride-2 transposed conv to 52 and
  a 2x pixel shuffle to 13 channels, resized by `scale`: flow delta (4 channels, x `scale`), mask
  logit (1), features (8). The first block reads (frame 0, frame 1, features 0, features 1, t);
  the others (both frames and both features warped by the flow so far, t, mask, features) plus
  the flow (resized by 1 / scale, divided by scale), and add their delta to the flow.
- Output: `lerp(warp(frame 1, flow[2:4]), warp(frame 0, flow[:2]), sigmoid(mask))`.
- Backward warp: `out(y, x) = image(y + flow_y, x + flow_x)`, bilinear, borders repeated
  (grid_sample with align_corners on: pixel p at `2p / (size - 1) - 1`), in float32.
- Frames are padded to multiples of 64 (`pad_align`) by the caller.

The head width and the blocks' widths are read from the weights (`RifeConfig.detect_from_weights`);
raw RIFE checkpoints' names (`module.` / `flownet.` prefixes, `blockN.`, the training-only
`teacher.` / `caltime.` parts) are converted as ComfyUI converts them (`convert_rife_keys`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch
import torch.nn.functional as F
from torch import nn

SCALES = (16, 8, 4, 2, 1)


@dataclass(frozen=True)
class RifeConfig:
    head: int = 4
    channels: tuple[int, ...] = (192, 128, 96, 64, 32)

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, torch.Tensor]) -> "RifeConfig":
        head = int(tensors["encode.cnn3.weight"].shape[1])  # ConvTranspose2d: [in, out, k, k]
        channels = tuple(int(tensors[f"blocks.{i}.conv0.1.0.weight"].shape[0])
                         for i in range(len(SCALES)) if f"blocks.{i}.conv0.1.0.weight" in tensors)
        if len(channels) != len(SCALES):
            raise ValueError(f"a RIFE IFNet has {len(SCALES)} blocks, the file has {len(channels)}")
        return cls(head=head, channels=channels)


def convert_rife_keys(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Raw RIFE names -> ComfyUI's: `module.` / `flownet.` removed, `blockN.` -> `blocks.N.`,
    `teacher.` / `caltime.` dropped."""
    out = {}
    for key, value in state.items():
        for prefix in ("module.", "flownet."):
            if key.startswith(prefix):
                key = key[len(prefix):]
        for i in range(len(SCALES)):
            if key.startswith(f"block{i}."):
                key = f"blocks.{i}." + key[len(f"block{i}."):]
        if not key.startswith(("teacher.", "caltime.")):
            out[key] = value
    return out


def backward_warp(image: torch.Tensor, flow: torch.Tensor) -> torch.Tensor:
    """`image` [B, C, H, W] sampled at each pixel plus `flow` [B, 2, H, W] (x, y in pixels),
    bilinear, borders repeated, align_corners on (module docstring)."""
    b, _, h, w = image.shape
    ys, xs = torch.meshgrid(torch.linspace(-1.0, 1.0, h, device=image.device, dtype=torch.float32),
                            torch.linspace(-1.0, 1.0, w, device=image.device, dtype=torch.float32), indexing="ij")
    gx = xs + flow[:, 0].float() / ((w - 1.0) / 2.0)
    gy = ys + flow[:, 1].float() / ((h - 1.0) / 2.0)
    grid = torch.stack([gx, gy], dim=3)
    out = F.grid_sample(image.float(), grid, mode="bilinear", padding_mode="border", align_corners=True)
    return out.to(image.dtype)


class Head(nn.Module):
    def __init__(self, out_channels: int) -> None:
        super().__init__()
        self.cnn0 = nn.Conv2d(3, 16, 3, 2, 1)
        self.cnn1 = nn.Conv2d(16, 16, 3, 1, 1)
        self.cnn2 = nn.Conv2d(16, 16, 3, 1, 1)
        self.cnn3 = nn.ConvTranspose2d(16, out_channels, 4, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.leaky_relu(self.cnn0(x), 0.2)
        x = F.leaky_relu(self.cnn1(x), 0.2)
        x = F.leaky_relu(self.cnn2(x), 0.2)
        return self.cnn3(x)


class ResConv(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, 1, 1)
        self.beta = nn.Parameter(torch.ones(1, c, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(torch.addcmul(x, self.conv(x), self.beta), 0.2)


class IFBlock(nn.Module):
    def __init__(self, in_planes: int, c: int) -> None:
        super().__init__()
        self.conv0 = nn.Sequential(nn.Sequential(nn.Conv2d(in_planes, c // 2, 3, 2, 1), nn.LeakyReLU(0.2)),
                                   nn.Sequential(nn.Conv2d(c // 2, c, 3, 2, 1), nn.LeakyReLU(0.2)))
        self.convblock = nn.Sequential(*(ResConv(c) for _ in range(8)))
        self.lastconv = nn.Sequential(nn.ConvTranspose2d(c, 4 * 13, 4, 2, 1), nn.PixelShuffle(2))

    def forward(self, x: torch.Tensor, flow: torch.Tensor | None, scale: int):
        x = F.interpolate(x, scale_factor=1.0 / scale, mode="bilinear")
        if flow is not None:
            flow = F.interpolate(flow, scale_factor=1.0 / scale, mode="bilinear") / scale
            x = torch.cat([x, flow], dim=1)
        out = F.interpolate(self.lastconv(self.convblock(self.conv0(x))), scale_factor=scale, mode="bilinear")
        return out[:, :4] * scale, out[:, 4:5], out[:, 5:]


class IFNet(nn.Module):
    """`extract_features(frame)` -> the head's features (cacheable); `interpolate(f0, f1, img0,
    img1, t [B, 1, H, W])` -> [B, 3, H, W]. H and W multiples of 64 (`pad_align`)."""

    pad_align = 64

    def __init__(self, config: RifeConfig) -> None:
        super().__init__()
        self.config = config
        h = config.head
        self.encode = Head(h)
        widths = [7 + 2 * h] + [20 + 2 * h] * (len(SCALES) - 1)
        self.blocks = nn.ModuleList(IFBlock(widths[i], config.channels[i]) for i in range(len(SCALES)))

    def extract_features(self, image: torch.Tensor) -> torch.Tensor:
        return self.encode(image)

    def interpolate(self, f0: torch.Tensor, f1: torch.Tensor, img0: torch.Tensor, img1: torch.Tensor,
                    t: torch.Tensor) -> torch.Tensor:
        b = img0.shape[0]
        f0, f1 = f0.expand(b, -1, -1, -1), f1.expand(b, -1, -1, -1)
        flow = mask = feat = None
        warped0, warped1 = img0, img1
        for block, scale in zip(self.blocks, SCALES):
            if flow is None:
                flow, mask, feat = block(torch.cat([img0, img1, f0, f1, t], dim=1), None, scale)
            else:
                x = torch.cat([warped0, warped1, backward_warp(f0, flow[:, :2]), backward_warp(f1, flow[:, 2:4]),
                               t, mask, feat], dim=1)
                delta, mask, feat = block(x, flow, scale)
                flow = flow + delta
            warped0 = backward_warp(img0, flow[:, :2])
            warped1 = backward_warp(img1, flow[:, 2:4])
        return torch.lerp(warped1, warped0, torch.sigmoid(mask))

    def forward(self, img0: torch.Tensor, img1: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return self.interpolate(self.encode(img0), self.encode(img1), img0, img1, t)
