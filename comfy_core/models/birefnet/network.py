"""BiRefNet (Zheng et al. 2024, "Bilateral Reference for High-Resolution Dichotomous Image
Segmentation"), the Swin-L variant ComfyUI's `comfy/background_removal/birefnet.py` builds for
`background_removal/birefnet.safetensors`; written here from the paper and that file's behaviour.

- Encoder (`bb.*`, models/birefnet/swin.py): the backbone on the image and on the image
  resized bilinearly (align_corners) to half size; each of the four stage outputs concatenated
  with the half-size pass's same stage, resized to its size (so widths double:
  `channels = 2 * embed * (8, 4, 2, 1)` from the deepest). The deepest level gets the three
  shallower levels, resized to its size, concatenated in front (the "context" `cxt`), then
  `squeeze_module.0` (a decoder block) brings it back to `channels[0]`.
- Decoder (`decoder.*`), from the deepest level up: the input image cut into the current size's
  tiles (column by column, each column top to bottom, tiles stacked along channels; tile `i`'s
  channel `c` is channel `3 i + c`) through `ipt_blk{5..1}` (two 3x3 convs) and concatenated;
  `decoder_block{4..1}`; at levels 4..2 a gradient attention `sigmoid(gdt_convs_attn(gdt_convs(p)))`
  multiplies the features; resized (bilinear, align_corners) to the next level and added to
  `lateral_block` (1x1) of the encoder's level; after block 1 resized to the full input size,
  the image itself (one tile) through `ipt_blk1`, concatenated, `conv_out1` (1x1) gives the logit.
  The training heads `conv_ms_spvn_*` and `gdt_convs_pred_*` are in the files but not used.
- A decoder block: 3x3 conv, BatchNorm, ReLU, the deformable ASPP, 3x3 conv, BatchNorm. The ASPP:
  branches of modulated deformable convs (`DeformableConv2d`: offsets and `2 sigmoid(modulator)`
  from plain convs of the same kernel; kernels 1, then `parallel_block_sizes` 1 / 3 / 7), each
  BatchNorm + ReLU, and global average pooling (1x1 conv, BatchNorm, ReLU, broadcast back);
  concatenated, 1x1 conv, BatchNorm, ReLU. BatchNorms use their running statistics (eval).

The modulated deformable convolution (Zhu et al. 2019, "Deformable ConvNets v2") is written here
in plain torch (`deform_conv2d`: per kernel tap a bilinear sample, zero outside the image, scaled
by its modulator, then one matmul); torchvision's `deform_conv2d` computes the same.

Widths (backbone, ASPP, decoder-block and tile-block middles, tile-block outputs, gradient-attention
width) are read from the weights (`BiRefNetConfig.detect_from_weights`), so the released file and
tiny test files load alike.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.models.birefnet.swin import SwinConfig, SwinTransformer

# Keys of the files the network does not use: training-only heads, and the Swin bias-table
# indices (a fixed function of the window, rebuilt here).
UNUSED_PATTERNS = ("decoder.conv_ms_spvn_", "decoder.gdt_convs_pred_", ".relative_position_index")
DETECT_KEY = "bb.layers.1.blocks.0.attn.relative_position_index"  # ComfyUI's marker for a BiRefNet file

logger = logging.getLogger(__name__)


class BiRefNetWeightsError(ValueError):
    """A file that is not a BiRefNet this engine builds (names what is wrong)."""


@dataclass(frozen=True)
class BiRefNetConfig:
    backbone: SwinConfig = SwinConfig()
    aspp_planes: int = 256  # every ASPP branch's width
    block_inter: int = 64  # decoder blocks' middle width
    tile_inter: int = 64  # ipt_blk's middle width
    tile_out: tuple[int, ...] = (384, 384, 192, 96, 48)  # ipt_blk5 .. ipt_blk1 outputs (channels // 8)
    gdt_width: int = 16
    parallel_block_sizes: tuple[int, ...] = (1, 3, 7)

    @property
    def channels(self) -> tuple[int, ...]:
        """Encoder widths after the two-scale concatenation, deepest first."""
        return tuple(2 * w for w in reversed(self.backbone.widths))

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, torch.Tensor]) -> "BiRefNetConfig":
        backbone = SwinConfig.detect_from_weights(tensors, "bb.")
        if len(backbone.depths) != 4:
            raise ValueError(f"a 4-stage Swin backbone is needed, the file has {len(backbone.depths)} stages")
        aspp = "squeeze_module.0.dec_att."
        sizes = []
        while f"{aspp}aspp_deforms.{len(sizes)}.atrous_conv.regular_conv.weight" in tensors:
            sizes.append(int(tensors[f"{aspp}aspp_deforms.{len(sizes)}.atrous_conv.regular_conv.weight"].shape[-1]))
        return cls(backbone=backbone,
                   aspp_planes=int(tensors[f"{aspp}aspp1.atrous_conv.regular_conv.weight"].shape[0]),
                   block_inter=int(tensors["squeeze_module.0.conv_in.weight"].shape[0]),
                   tile_inter=int(tensors["decoder.ipt_blk5.conv1.weight"].shape[0]),
                   tile_out=tuple(int(tensors[f"decoder.ipt_blk{i}.conv_out.weight"].shape[0]) for i in (5, 4, 3, 2, 1)),
                   gdt_width=int(tensors["decoder.gdt_convs_4.0.weight"].shape[0]),
                   parallel_block_sizes=tuple(sizes))


def deform_conv2d(x: torch.Tensor, offset: torch.Tensor, mask: torch.Tensor, weight: torch.Tensor,
                  padding: int) -> torch.Tensor:
    """Modulated deformable convolution, stride 1, dilation 1, one offset group, no bias.

    x [B, C, H, W]; offset [B, 2 k*k, Ho, Wo] ((dy, dx) per tap, taps row-major); mask
    [B, k*k, Ho, Wo]; weight [O, C, k, k] -> [B, O, Ho, Wo]. Tap (i, j) of output (y, x) samples x
    bilinearly at (y - padding + i + dy, x - padding + j + dx), corners outside the image reading 0."""
    b, c, h, w = x.shape
    out_ch, _, kh, kw = weight.shape
    ho, wo = offset.shape[2], offset.shape[3]
    base_y = torch.arange(ho, device=x.device, dtype=torch.float32).view(1, ho, 1) - padding
    base_x = torch.arange(wo, device=x.device, dtype=torch.float32).view(1, 1, wo) - padding
    out = x.new_zeros(b, out_ch, ho, wo)
    for tap in range(kh * kw):
        i, j = divmod(tap, kw)
        py = base_y + i + offset[:, 2 * tap].float()  # [B, Ho, Wo]
        px = base_x + j + offset[:, 2 * tap + 1].float()
        # pixel centres of align_corners=False: pixel p sits at (2p + 1) / size - 1
        grid = torch.stack(((2 * px + 1) / w - 1, (2 * py + 1) / h - 1), dim=-1)
        sampled = F.grid_sample(x.float(), grid, mode="bilinear", padding_mode="zeros", align_corners=False)
        sampled = (sampled * mask[:, tap:tap + 1].float()).to(x.dtype)  # [B, C, Ho, Wo]
        out = out + torch.einsum("bchw,oc->bohw", sampled, weight[:, :, i, j])
    return out


class DeformableConv2d(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel: int, padding: int) -> None:
        super().__init__()
        self.padding = padding
        self.offset_conv = nn.Conv2d(in_channels, 2 * kernel * kernel, kernel, padding=padding)
        self.modulator_conv = nn.Conv2d(in_channels, kernel * kernel, kernel, padding=padding)
        self.regular_conv = nn.Conv2d(in_channels, out_channels, kernel, padding=padding, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        offset = self.offset_conv(x)
        modulator = 2.0 * torch.sigmoid(self.modulator_conv(x))
        return deform_conv2d(x, offset, modulator, self.regular_conv.weight.to(x.dtype), self.padding)


class AsppBranch(nn.Module):
    def __init__(self, in_channels: int, planes: int, kernel: int) -> None:
        super().__init__()
        self.atrous_conv = DeformableConv2d(in_channels, planes, kernel, kernel // 2)
        self.bn = nn.BatchNorm2d(planes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn(self.atrous_conv(x)))


class ASPPDeformable(nn.Module):
    def __init__(self, channels: int, planes: int, sizes: tuple[int, ...]) -> None:
        super().__init__()
        self.aspp1 = AsppBranch(channels, planes, 1)
        self.aspp_deforms = nn.ModuleList(AsppBranch(channels, planes, k) for k in sizes)
        self.global_avg_pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(channels, planes, 1, bias=False),
                                             nn.BatchNorm2d(planes), nn.ReLU())
        self.conv1 = nn.Conv2d(planes * (2 + len(sizes)), channels, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        branches = [self.aspp1(x), *(branch(x) for branch in self.aspp_deforms)]
        pooled = self.global_avg_pool(x).expand(-1, -1, x.shape[2], x.shape[3])
        return F.relu(self.bn1(self.conv1(torch.cat([*branches, pooled], dim=1))))


class DecoderBlock(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, config: BiRefNetConfig) -> None:
        super().__init__()
        inter = config.block_inter
        self.conv_in = nn.Conv2d(in_channels, inter, 3, padding=1)
        self.bn_in = nn.BatchNorm2d(inter)
        self.dec_att = ASPPDeformable(inter, config.aspp_planes, config.parallel_block_sizes)
        self.conv_out = nn.Conv2d(inter, out_channels, 3, padding=1)
        self.bn_out = nn.BatchNorm2d(out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.dec_att(F.relu(self.bn_in(self.conv_in(x))))
        return self.bn_out(self.conv_out(x))


class TileBlock(nn.Module):
    """ComfyUI's `SimpleConvs`: two 3x3 convs, no activation."""

    def __init__(self, in_channels: int, out_channels: int, inter: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, inter, 3, padding=1)
        self.conv_out = nn.Conv2d(inter, out_channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv_out(self.conv1(x))


class Lateral(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def image_tiles(image: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """[B, C, H, W] cut into `height x width` tiles, column by column (each top to bottom), stacked
    along channels: [B, (H/height) (W/width) C, height, width] (BiRefNet's `get_patches_batch`)."""
    b, c, h, w = image.shape
    if h % height or w % width:
        raise ValueError(f"BiRefNet: a {h}x{w} input does not cut into {height}x{width} tiles; "
                         f"run it at a multiple of 32")
    rows, cols = h // height, w // width
    tiles = image.view(b, c, rows, height, cols, width).permute(0, 4, 2, 1, 3, 5)  # [B, cols, rows, C, h, w]
    return tiles.reshape(b, cols * rows * c, height, width)


def _resize(x: torch.Tensor, size) -> torch.Tensor:
    size = tuple(size)
    if tuple(x.shape[2:]) == size:
        return x
    return F.interpolate(x, size=size, mode="bilinear", align_corners=True)


class Decoder(nn.Module):
    def __init__(self, config: BiRefNetConfig) -> None:
        super().__init__()
        ch = config.channels
        t5, t4, t3, t2, t1 = config.tile_out
        inter = config.tile_inter
        patch = config.backbone.patch_size
        # tiles per level: the image cut to the level's size, 3 channels each
        self.ipt_blk5 = TileBlock(3 * (patch * 8) ** 2, t5, inter)
        self.ipt_blk4 = TileBlock(3 * (patch * 4) ** 2, t4, inter)
        self.ipt_blk3 = TileBlock(3 * (patch * 2) ** 2, t3, inter)
        self.ipt_blk2 = TileBlock(3 * patch ** 2, t2, inter)
        self.ipt_blk1 = TileBlock(3, t1, inter)
        self.decoder_block4 = DecoderBlock(ch[0] + t5, ch[1], config)
        self.decoder_block3 = DecoderBlock(ch[1] + t4, ch[2], config)
        self.decoder_block2 = DecoderBlock(ch[2] + t3, ch[3], config)
        self.decoder_block1 = DecoderBlock(ch[3] + t2, ch[3] // 2, config)
        self.conv_out1 = nn.Sequential(nn.Conv2d(ch[3] // 2 + t1, 1, 1))
        self.lateral_block4 = Lateral(ch[1])
        self.lateral_block3 = Lateral(ch[2])
        self.lateral_block2 = Lateral(ch[3])
        g = config.gdt_width
        for level, width in ((4, ch[1]), (3, ch[2]), (2, ch[3])):
            self.add_module(f"gdt_convs_{level}", nn.Sequential(nn.Conv2d(width, g, 3, padding=1), nn.BatchNorm2d(g),
                                                                nn.ReLU()))
            self.add_module(f"gdt_convs_attn_{level}", nn.Sequential(nn.Conv2d(g, 1, 1)))

    def _with_tiles(self, p: torch.Tensor, image: torch.Tensor, block: TileBlock) -> torch.Tensor:
        return torch.cat([p, block(image_tiles(image, p.shape[2], p.shape[3]))], dim=1)

    def _gdt(self, p: torch.Tensor, level: int) -> torch.Tensor:
        attn = getattr(self, f"gdt_convs_attn_{level}")(getattr(self, f"gdt_convs_{level}")(p))
        return p * torch.sigmoid(attn)

    def forward(self, image: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, x3: torch.Tensor,
                x4: torch.Tensor) -> torch.Tensor:
        p4 = self._gdt(self.decoder_block4(self._with_tiles(x4, image, self.ipt_blk5)), 4)
        p3 = _resize(p4, x3.shape[2:]) + self.lateral_block4(x3)
        p3 = self._gdt(self.decoder_block3(self._with_tiles(p3, image, self.ipt_blk4)), 3)
        p2 = _resize(p3, x2.shape[2:]) + self.lateral_block3(x2)
        p2 = self._gdt(self.decoder_block2(self._with_tiles(p2, image, self.ipt_blk3)), 2)
        p1 = _resize(p2, x1.shape[2:]) + self.lateral_block2(x1)
        p1 = self.decoder_block1(self._with_tiles(p1, image, self.ipt_blk2))
        p1 = _resize(p1, image.shape[2:])
        return self.conv_out1(self._with_tiles(p1, image, self.ipt_blk1))  # [B, 1, H, W] logits


class BiRefNet(nn.Module):
    """`forward(pixels [B, 3, H, W])` (normalised, H and W multiples of 32) -> logits [B, 1, H, W]."""

    def __init__(self, config: BiRefNetConfig) -> None:
        super().__init__()
        self.config = config
        ch = config.channels
        self.bb = SwinTransformer(config.backbone)
        self.squeeze_module = nn.Sequential(DecoderBlock(ch[0] + sum(ch[1:]), ch[0], config))
        self.decoder = Decoder(config)

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        full = self.bb(x)
        half = self.bb(_resize(x, (x.shape[2] // 2, x.shape[3] // 2)))
        x1, x2, x3, x4 = (torch.cat([f, _resize(g, f.shape[2:])], dim=1) for f, g in zip(full, half))
        x4 = torch.cat([_resize(x1, x4.shape[2:]), _resize(x2, x4.shape[2:]), _resize(x3, x4.shape[2:]), x4], dim=1)
        return x1, x2, x3, x4

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1, x2, x3, x4 = self.encode(x)
        return self.decoder(x, x1, x2, x3, self.squeeze_module(x4))


def network_from_state_dict(state: Mapping[str, torch.Tensor], name: str = "state dict",
                            dtype: torch.dtype = torch.float32) -> BiRefNet:
    """The BiRefNet of a state dict in ComfyUI's names, weights in `dtype`, in eval mode on the
    CPU. Every tensor the network uses must be in the file with its shape (BatchNorms'
    `num_batches_tracked` may be absent); the unused training heads and bias-table indices are
    dropped, and any other tensor the network does not hold is dropped with a warning (ComfyUI
    loads these files with `strict=False`)."""
    from comfy_core.models.resident import load_exact

    if DETECT_KEY not in state:
        raise BiRefNetWeightsError(f"{name}: not a background removal model (no {DETECT_KEY})")
    tensors = {k: v for k, v in state.items() if not any(p in k for p in UNUSED_PATTERNS)}
    try:
        config = BiRefNetConfig.detect_from_weights(tensors)
    except (KeyError, ValueError, IndexError) as exc:
        raise BiRefNetWeightsError(f"{name}: not a BiRefNet file this engine builds ({type(exc).__name__}: {exc})") from None
    network = BiRefNet(config)
    expected = network.state_dict()
    extra = sorted(set(tensors) - set(expected))
    if extra:  # ComfyUI loads these files non-strictly and drops what its network does not hold
        logger.warning("%s: BiRefNet weights not used: %s%s", name, extra[:5], " ..." if len(extra) > 5 else "")
        tensors = {k: v for k, v in tensors.items() if k in expected}
    optional = {k for k in expected if k.endswith("num_batches_tracked")}
    return load_exact(network, tensors, what=f"{name}: BiRefNet", error=BiRefNetWeightsError, optional=optional,
                      dtype=dtype)
