"""T2I-Adapter networks (Mou et al. 2023, "T2I-Adapter: Learning Adapters to Dig out More
Controllable Ability for Text-to-Image Diffusion Models"; TencentARC/T2I-Adapter), in the layouts
ComfyUI's `comfy/t2i_adapter/adapter.py` loads: the full adapter (SD1.x and SDXL) and the light
one. Written here from that description; parameter names are the original files'.

The hint is pixel-unshuffled (8x, or 16x for SDXL: channels x 64 / x 256), then a chain of
residual blocks gives one feature map per UNet level. `forward` returns the residuals in
ComfyUI's layout: `{"input": [...]}` (plus `"middle"` for SDXL), with `None` where a UNet input
block gets nothing, ordered so that popping from the end walks the UNet's input blocks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn


class AdapterDownsample(nn.Module):
    """Stride-2 3x3 convolution (`op`), or 2x2 average pooling padded on odd sides (no weights)."""

    def __init__(self, channels: int, use_conv: bool) -> None:
        super().__init__()
        self.use_conv = use_conv
        if use_conv:
            self.op = nn.Conv2d(channels, channels, 3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.use_conv:
            return self.op(x)
        # The original sets the pool's padding to (H % 2, W % 2), counting the padded zeros.
        return F.avg_pool2d(x, kernel_size=2, stride=2, padding=(x.shape[2] % 2, x.shape[3] % 2))


class AdapterResBlock(nn.Module):
    """`[down] -> [in_conv] -> x + block2(relu(block1(x)))` (the full adapter's `sk=True` block)."""

    def __init__(self, in_c: int, out_c: int, down: bool, ksize: int, use_conv: bool) -> None:
        super().__init__()
        self.in_conv = nn.Conv2d(in_c, out_c, ksize, 1, ksize // 2) if in_c != out_c else None
        self.block1 = nn.Conv2d(out_c, out_c, 3, 1, 1)
        self.block2 = nn.Conv2d(out_c, out_c, ksize, 1, ksize // 2)
        self.down_opt = AdapterDownsample(in_c, use_conv) if down else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.down_opt is not None:
            x = self.down_opt(x)
        if self.in_conv is not None:
            x = self.in_conv(x)
        return x + self.block2(F.relu(self.block1(x)))


@dataclass(frozen=True)
class AdapterConfig:
    kind: str  # "full" or "light"
    cin: int  # channels after unshuffling
    channels: tuple[int, ...] = (320, 640, 1280, 1280)
    nums_rb: int = 2
    ksize: int = 3
    use_conv: bool = False
    xl: bool = False

    @property
    def unshuffle(self) -> int:
        return 16 if self.xl else 8

    @property
    def input_channels(self) -> int:
        return self.cin // (self.unshuffle * self.unshuffle)

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any]) -> "AdapterConfig | None":
        """The adapter's structure from names and shapes, or None when it is no T2I-Adapter."""
        if "body.0.in_conv.weight" in tensors:
            return cls("light", tensors["body.0.in_conv.weight"].shape[1], nums_rb=4)
        if "conv_in.weight" in tensors:
            cin, channel = tensors["conv_in.weight"].shape[1], tensors["conv_in.weight"].shape[0]
            ksize = tensors["body.0.block2.weight"].shape[2]
            use_conv = any(k.endswith("down_opt.op.weight") for k in tensors)
            return cls("full", cin, (channel, channel * 2, channel * 4, channel * 4), 2, ksize, use_conv,
                       xl=cin in (256, 768))
        return None


class Adapter(nn.Module):
    """The full adapter: `conv_in`, then `nums_rb` blocks per level (`body.i`)."""

    def __init__(self, config: AdapterConfig) -> None:
        super().__init__()
        self.config = config
        ch = config.channels
        down_levels, plain_levels = ((2,), (1,)) if config.xl else ((1, 2, 3), ())
        body = []
        for i in range(len(ch)):
            for j in range(config.nums_rb):
                if j == 0 and i in down_levels:
                    body.append(AdapterResBlock(ch[i - 1], ch[i], True, config.ksize, config.use_conv))
                elif j == 0 and i in plain_levels:
                    body.append(AdapterResBlock(ch[i - 1], ch[i], False, config.ksize, config.use_conv))
                else:
                    body.append(AdapterResBlock(ch[i], ch[i], False, config.ksize, config.use_conv))
        self.body = nn.ModuleList(body)
        self.conv_in = nn.Conv2d(config.cin, ch[0], 3, 1, 1)

    def forward(self, x: torch.Tensor) -> dict[str, list[torch.Tensor | None]]:
        x = self.conv_in(F.pixel_unshuffle(x, self.config.unshuffle))
        features: list[torch.Tensor | None] = []
        for i in range(len(self.config.channels)):
            for j in range(self.config.nums_rb):
                x = self.body[i * self.config.nums_rb + j](x)
            if self.config.xl:
                # SDXL's 9 input blocks: residuals after blocks 3, 5, 8 and the middle block.
                features += [None] * (3 if i == 0 else 2 if i == 2 else 1)
            else:
                features += [None, None]
            features.append(x)
        features.reverse()
        if self.config.xl:
            return {"input": features[1:], "middle": features[:1]}
        return {"input": features}


class LightResBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.block1 = nn.Conv2d(channels, channels, 3, 1, 1)
        self.block2 = nn.Conv2d(channels, channels, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block2(F.relu(self.block1(x)))


class Extractor(nn.Module):
    """`[pool] -> 1x1 in_conv -> light blocks -> 1x1 out_conv` (one level of the light adapter)."""

    def __init__(self, in_c: int, inter_c: int, out_c: int, nums_rb: int, down: bool) -> None:
        super().__init__()
        self.in_conv = nn.Conv2d(in_c, inter_c, 1)
        self.body = nn.Sequential(*(LightResBlock(inter_c) for _ in range(nums_rb)))
        self.out_conv = nn.Conv2d(inter_c, out_c, 1)
        self.down = AdapterDownsample(in_c, False) if down else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.down is not None:
            x = self.down(x)
        return self.out_conv(self.body(self.in_conv(x)))


class AdapterLight(nn.Module):
    def __init__(self, config: AdapterConfig) -> None:
        super().__init__()
        self.config = config
        ch = config.channels
        self.body = nn.ModuleList(
            Extractor(config.cin if i == 0 else ch[i - 1], ch[i] // 4, ch[i], config.nums_rb, down=i > 0)
            for i in range(len(ch)))

    def forward(self, x: torch.Tensor) -> dict[str, list[torch.Tensor | None]]:
        x = F.pixel_unshuffle(x, self.config.unshuffle)
        features: list[torch.Tensor | None] = []
        for block in self.body:
            x = block(x)
            features += [None, None, x]
        return {"input": features[::-1]}


def build_adapter(config: AdapterConfig) -> nn.Module:
    return AdapterLight(config) if config.kind == "light" else Adapter(config)


def diffusers_adapter_names(names: list[str]) -> dict[str, str]:
    """diffusers T2IAdapter names (`adapter.body.i.resnets.j.*`, `adapter.body.i.in_conv.*`,
    `adapter.conv_in.*`) -> the original ones (`body.{i * 2 + j}.*`, `body.{i * 2}.in_conv.*`,
    `conv_in.*`), as ComfyUI renames them (two res blocks per level)."""
    import re

    out = {}
    for name in names:
        if (m := re.match(r"adapter\.body\.(\d+)\.resnets\.(\d+)\.(.*)", name)):
            out[f"body.{int(m.group(1)) * 2 + int(m.group(2))}.{m.group(3)}"] = name
        elif (m := re.match(r"adapter\.body\.(\d+)\.(.*)", name)):
            out[f"body.{int(m.group(1)) * 2}.{m.group(2)}"] = name
        elif name.startswith("adapter."):
            out[name[len("adapter."):]] = name
        else:
            out[name] = name
    return out
