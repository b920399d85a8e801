"""RT-DETRv4's sizes (`RTDETRConfig`, read from a file's names and shapes), its HGNetv2 backbone and its
hybrid encoder, in ComfyUI's module and tensor names (comfy/ldm/rt_detr/rtdetr_v4.py); the decoder and
the whole detector are comfy_core/models/rtdetr.py's.

HGNetv2: PaddleClas's backbone (stem of stride 4, four stages of HG blocks: chained convs whose
outputs are concatenated and squeezed), BatchNorm kept as ComfyUI's files store it. The hybrid
encoder (RT-DETR, Zhao et al. 2024, "DETRs Beat YOLOs on Real-time Object Detection"; D-FINE's
variant): one AIFI transformer layer on the stride-32 map, a top-down FPN and a bottom-up PAN of
CSP-ELAN blocks (YOLOv9's GELAN with RepVGG bottlenecks) and SCDown downsampling (YOLOv10), their
convolutions with BatchNorm folded in (a bias, no norm) and each RepVGG block a single 3x3 conv.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

# The side the network runs at (ComfyUI's RTDETR_detect scales every image to 640 x 640).
INPUT_SIDE = 640

# --- configuration -------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class StageConfig:
    """One HGNetv2 stage: `in_ch -> out_ch` through `blocks` HG blocks of `layers` convs of `mid_ch`."""
    in_ch: int
    mid_ch: int
    out_ch: int
    blocks: int
    downsample: bool
    light: bool
    kernel: int
    layers: int


# HGNetv2-B5 (ComfyUI's `HGNetv2._STAGE_CFGS`).
B5_STAGES = (StageConfig(64, 64, 128, 1, False, False, 3, 6), StageConfig(128, 128, 512, 2, True, False, 3, 6),
             StageConfig(512, 256, 1024, 5, True, True, 5, 6), StageConfig(1024, 512, 2048, 2, True, True, 5, 6))


@dataclasses.dataclass(frozen=True)
class RTDETRConfig:
    """Sizes of an RT-DETRv4 network; the defaults are ComfyUI's (the X model)."""
    stem: tuple[int, int, int] = (3, 32, 64)
    stages: tuple[StageConfig, ...] = B5_STAGES
    return_idx: tuple[int, ...] = (1, 2, 3)
    feat_strides: tuple[int, ...] = (8, 16, 32)
    enc_hidden: int = 384
    enc_ff: int = 2048
    enc_layers: int = 1
    enc_heads: int = 8
    csp_hidden: int = 192          # RepNCSPELAN4's c4: round(expansion * hidden // 2)
    csp_blocks: int = 3            # round(3 * depth_mult)
    dec_hidden: int = 256
    dec_ff: int = 1024
    dec_layers: int = 6
    dec_heads: int = 8
    num_points: tuple[int, ...] = (3, 6, 3)
    num_classes: int = 80
    num_queries: int = 300
    reg_max: int = 32
    reg_scale: float = 8.0
    spatial_size: int = INPUT_SIDE

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Sequence[int]], prefix: str = "") -> "RTDETRConfig":
        """The sizes from tensor names and shapes (`{name: shape}`), names under `prefix`."""
        def shape(name: str) -> tuple[int, ...]:
            return tuple(tensors[prefix + name])

        def count(pattern: str) -> int:
            n = 0
            while any(k.startswith(prefix + pattern.format(n)) for k in tensors):
                n += 1
            return n

        stages = []
        for i in range(count("backbone.stages.{}.")):
            p = f"backbone.stages.{i}."
            light = prefix + p + "blocks.0.layers.0.conv1.conv.weight" in tensors
            layer = p + "blocks.0.layers.0."
            first = shape(layer + ("conv1.conv.weight" if light else "conv.weight"))  # [mid, in, k, k]
            kernel = shape(layer + ("conv2.conv.weight" if light else "conv.weight"))[-1]
            stages.append(StageConfig(first[1], first[0], shape(p + "blocks.0.aggregation.1.conv.weight")[0],
                                      count(p + "blocks.{}."), prefix + p + "downsample.conv.weight" in tensors,
                                      light, kernel, count(p + "blocks.0.layers.{}.")))
        stem1, stem4 = shape("backbone.stem.stem1.conv.weight"), shape("backbone.stem.stem4.conv.weight")
        anchors = shape("decoder.anchors")[1]
        # anchors = side^2 * (1/8^2 + 1/16^2 + 1/32^2) for strides 8, 16, 32
        side = round(math.sqrt(anchors / sum(1 / s ** 2 for s in (8, 16, 32))))
        corners = shape("decoder.dec_bbox_head.0.layers.2.weight")[0]
        return cls(
            stem=(stem1[1], stem1[0], stem4[0]), stages=tuple(stages),
            enc_hidden=shape("encoder.input_proj.0.conv.weight")[0],
            enc_ff=shape("encoder.encoder.0.layers.0.linear1.weight")[0],
            enc_layers=count("encoder.encoder.0.layers.{}."),
            csp_hidden=shape("encoder.fpn_blocks.0.cv2.1.conv.weight")[0],
            csp_blocks=count("encoder.fpn_blocks.0.cv2.0.bottlenecks.{}."),
            dec_hidden=shape("decoder.enc_output.proj.weight")[0],
            dec_ff=shape("decoder.decoder.layers.0.linear1.weight")[0],
            dec_layers=count("decoder.decoder.layers.{}."),
            num_classes=shape("decoder.enc_score_head.weight")[0],
            num_queries=min(300, anchors), reg_max=corners // 4 - 1, spatial_size=side)

    @property
    def backbone_channels(self) -> list[int]:
        return [self.stages[i].out_ch for i in self.return_idx]


# --- HGNetv2 backbone (BatchNorm kept, as ComfyUI's files store it) -------------------------------

class ConvBNAct(nn.Module):
    """Conv (no bias) -> BatchNorm -> ReLU (or nothing)."""

    def __init__(self, ic: int, oc: int, k: int = 3, s: int = 1, groups: int = 1, act: bool = True) -> None:
        super().__init__()
        self.conv = nn.Conv2d(ic, oc, k, s, (k - 1) // 2, groups=groups, bias=False)
        self.bn = nn.BatchNorm2d(oc)
        self.act = nn.ReLU() if act else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(x)))


class LightConvBNAct(nn.Module):
    """1x1 conv (no activation), then a depthwise k x k conv with ReLU."""

    def __init__(self, ic: int, oc: int, k: int) -> None:
        super().__init__()
        self.conv1 = ConvBNAct(ic, oc, 1, act=False)
        self.conv2 = ConvBNAct(oc, oc, k, groups=oc)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2(self.conv1(x))


class StemBlock(nn.Module):
    """HGNetv2 stem: stride 4 overall; a 2x2 conv branch beside a 2x2 max pool (PaddleClas pads
    one pixel right and bottom before both, by hand)."""

    def __init__(self, ic: int, mc: int, oc: int) -> None:
        super().__init__()
        self.stem1 = ConvBNAct(ic, mc, 3, 2)
        self.stem2a = ConvBNAct(mc, mc // 2, 2, 1)
        self.stem2b = ConvBNAct(mc // 2, mc, 2, 1)
        self.stem3 = ConvBNAct(mc * 2, mc, 3, 2)
        self.stem4 = ConvBNAct(mc, oc, 1)
        self.pool = nn.MaxPool2d(2, 1, ceil_mode=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.pad(self.stem1(x), (0, 1, 0, 1))
        branch = self.stem2b(F.pad(self.stem2a(x), (0, 1, 0, 1)))
        return self.stem4(self.stem3(torch.cat([self.pool(x), branch], 1)))


class HGBlock(nn.Module):
    """`layers` chained convs; the input and every output concatenated, squeezed to out/2 then out."""

    def __init__(self, ic: int, mc: int, oc: int, layers: int, k: int, residual: bool, light: bool) -> None:
        super().__init__()
        self.residual = residual
        make = (lambda i, o: LightConvBNAct(i, o, k)) if light else (lambda i, o: ConvBNAct(i, o, k))
        self.layers = nn.ModuleList([make(ic if i == 0 else mc, mc) for i in range(layers)])
        self.aggregation = nn.Sequential(ConvBNAct(ic + layers * mc, oc // 2, 1), ConvBNAct(oc // 2, oc, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outs = [x]
        for layer in self.layers:
            outs.append(layer(outs[-1]))
        y = self.aggregation(torch.cat(outs, 1))
        return y + x if self.residual else y


class HGStage(nn.Module):
    def __init__(self, cfg: StageConfig) -> None:
        super().__init__()
        # a depthwise stride-2 conv without activation (absent in the first stage)
        self.downsample = ConvBNAct(cfg.in_ch, cfg.in_ch, 3, 2, groups=cfg.in_ch, act=False) if cfg.downsample \
            else nn.Identity()
        self.blocks = nn.Sequential(*[
            HGBlock(cfg.in_ch if i == 0 else cfg.out_ch, cfg.mid_ch, cfg.out_ch, cfg.layers, cfg.kernel,
                    residual=i != 0, light=cfg.light) for i in range(cfg.blocks)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(self.downsample(x))


class HGNetv2(nn.Module):
    def __init__(self, config: RTDETRConfig) -> None:
        super().__init__()
        self.stem = StemBlock(*config.stem)
        self.stages = nn.ModuleList([HGStage(s) for s in config.stages])
        self.return_idx = list(config.return_idx)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        x = self.stem(x)
        outs = []
        for i, stage in enumerate(self.stages):
            x = stage(x)
            if i in self.return_idx:
                outs.append(x)
        return outs


# --- hybrid encoder (convolutions with BatchNorm folded in) ---------------------------------------

class ConvNormLayer(nn.Module):
    """Conv with bias (BatchNorm folded in), then SiLU or nothing."""

    def __init__(self, ic: int, oc: int, k: int, s: int, groups: int = 1, act: bool = False) -> None:
        super().__init__()
        self.conv = nn.Conv2d(ic, oc, k, s, (k - 1) // 2, groups=groups, bias=True)
        self.act = nn.SiLU() if act else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.conv(x))


class VGGBlock(nn.Module):
    """RepVGG block with its branches re-parameterised into one 3x3 conv (+ SiLU)."""

    def __init__(self, ic: int, oc: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(ic, oc, 3, 1, 1, bias=True)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.conv(x))


class CSPLayer(nn.Module):
    """Two 1x1 branches, one through `n` RepVGG blocks, summed (expansion 1: no output conv)."""

    def __init__(self, ic: int, oc: int, n: int) -> None:
        super().__init__()
        self.conv1 = ConvNormLayer(ic, oc, 1, 1, act=True)
        self.conv2 = ConvNormLayer(ic, oc, 1, 1, act=True)
        self.bottlenecks = nn.Sequential(*[VGGBlock(oc, oc) for _ in range(n)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bottlenecks(self.conv1(x)) + self.conv2(x)


class RepNCSPELAN4(nn.Module):
    """CSP-ELAN block (YOLOv9's GELAN): split in two, two chained CSP stages, all four concatenated."""

    def __init__(self, c1: int, c2: int, c3: int, c4: int, n: int) -> None:
        super().__init__()
        self.c = c3 // 2
        self.cv1 = ConvNormLayer(c1, c3, 1, 1, act=True)
        self.cv2 = nn.Sequential(CSPLayer(c3 // 2, c4, n), ConvNormLayer(c4, c4, 3, 1, act=True))
        self.cv3 = nn.Sequential(CSPLayer(c4, c4, n), ConvNormLayer(c4, c4, 3, 1, act=True))
        self.cv4 = ConvNormLayer(c3 + 2 * c4, c2, 1, 1, act=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = list(self.cv1(x).split((self.c, self.c), 1))
        y.append(self.cv2(y[-1]))
        y.append(self.cv3(y[-1]))
        return self.cv4(torch.cat(y, 1))


class SCDown(nn.Module):
    """Separable downsampling: 1x1 conv, then a depthwise stride-2 conv (YOLOv10)."""

    def __init__(self, ic: int, oc: int, k: int, s: int) -> None:
        super().__init__()
        self.cv1 = ConvNormLayer(ic, oc, 1, 1)
        self.cv2 = ConvNormLayer(oc, oc, k, s, groups=oc)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cv2(self.cv1(x))


class SelfAttention(nn.Module):
    """Multi-head attention with separate q/k/v/out projections (softmax(q k^T / sqrt(d)) v)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        b, lq, dim = query.shape

        def split(t: torch.Tensor) -> torch.Tensor:  # [B, L, D] -> [B, heads, L, D / heads]
            return t.reshape(b, t.shape[1], self.heads, dim // self.heads).transpose(1, 2)

        out = F.scaled_dot_product_attention(split(self.q_proj(query)), split(self.k_proj(key)),
                                             split(self.v_proj(value)))
        return self.out_proj(out.transpose(1, 2).reshape(b, lq, dim))


class EncoderLayer(nn.Module):
    """AIFI layer: post-norm self-attention (position added to q and k) and a GELU MLP."""

    def __init__(self, dim: int, heads: int, ff: int) -> None:
        super().__init__()
        self.self_attn = SelfAttention(dim, heads)
        self.linear1 = nn.Linear(dim, ff)
        self.linear2 = nn.Linear(ff, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.norm2 = nn.LayerNorm(dim)

    def forward(self, src: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        q = src + pos
        src = self.norm1(src + self.self_attn(q, q, src))
        return self.norm2(src + self.linear2(F.gelu(self.linear1(src))))


class TransformerEncoder(nn.Module):
    def __init__(self, layers: int, dim: int, heads: int, ff: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList([EncoderLayer(dim, heads, ff) for _ in range(layers)])


def sincos_position(w: int, h: int, dim: int, temperature: float = 10000.0) -> torch.Tensor:
    """2-D sine-cosine position embedding `[1, w*h, dim]`: (sin, cos) of x then of y, each over
    dim/4 frequencies temperature^(-i / (dim/4)); positions in (x-major, then y) order, as
    RT-DETR's encoder builds it (meshgrid indexing "ij" over (w, h))."""
    gw, gh = torch.meshgrid(torch.arange(w, dtype=torch.float32), torch.arange(h, dtype=torch.float32),
                            indexing="ij")
    quarter = dim // 4
    omega = 1.0 / temperature ** (torch.arange(quarter, dtype=torch.float32) / quarter)
    ow = gw.flatten()[:, None] * omega[None]
    oh = gh.flatten()[:, None] * omega[None]
    return torch.cat([ow.sin(), ow.cos(), oh.sin(), oh.cos()], 1)[None]


class HybridEncoder(nn.Module):
    """Input projections, AIFI on the last (stride-32) map, top-down FPN and bottom-up PAN."""

    def __init__(self, config: RTDETRConfig) -> None:
        super().__init__()
        hidden = self.hidden = config.enc_hidden
        channels = config.backbone_channels
        self.strides = list(config.feat_strides)
        self.use_encoder_idx = [len(channels) - 1]
        self.spatial_size = config.spatial_size
        self.input_proj = nn.ModuleList([nn.Sequential() for _ in channels])
        for seq, ch in zip(self.input_proj, channels):
            seq.add_module("conv", nn.Conv2d(ch, hidden, 1, bias=True))
        self.encoder = nn.ModuleList([TransformerEncoder(config.enc_layers, hidden, config.enc_heads, config.enc_ff)
                                      for _ in self.use_encoder_idx])
        n = len(channels) - 1

        def elan() -> RepNCSPELAN4:
            return RepNCSPELAN4(hidden * 2, hidden, hidden * 2, config.csp_hidden, config.csp_blocks)

        self.lateral_convs = nn.ModuleList([ConvNormLayer(hidden, hidden, 1, 1) for _ in range(n)])
        self.fpn_blocks = nn.ModuleList([elan() for _ in range(n)])
        self.downsample_convs = nn.ModuleList([nn.Sequential(SCDown(hidden, hidden, 3, 2)) for _ in range(n)])
        self.pan_blocks = nn.ModuleList([elan() for _ in range(n)])

    def forward(self, feats: list[torch.Tensor]) -> list[torch.Tensor]:
        proj = [p(f) for p, f in zip(self.input_proj, feats)]
        for enc, idx in zip(self.encoder, self.use_encoder_idx):
            h, w = proj[idx].shape[2:]
            src = proj[idx].flatten(2).permute(0, 2, 1)  # [B, h*w, C]
            # ComfyUI builds the embedding for the fixed input size (its (w, h) from the
            # stride-32 grid); the arguments here are that grid's sides in the same order.
            side = self.spatial_size // self.strides[idx]
            pos = sincos_position(side, side, self.hidden).to(src)
            for layer in enc.layers:
                src = layer(src, pos)
            proj[idx] = src.permute(0, 2, 1).reshape(-1, self.hidden, h, w).contiguous()
        n = len(proj)
        inner = [proj[-1]]
        for k in range(n - 1, 0, -1):
            j = n - 1 - k
            top = self.lateral_convs[j](inner[0])
            inner[0] = top
            up = F.interpolate(top, scale_factor=2.0, mode="nearest")
            inner.insert(0, self.fpn_blocks[j](torch.cat([up, proj[k - 1]], 1)))
        outs = [inner[0]]
        for k in range(n - 1):
            outs.append(self.pan_blocks[k](torch.cat([self.downsample_convs[k](outs[-1]), inner[k + 1]], 1)))
        return outs
