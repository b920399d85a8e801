"""HunyuanVideo 1.0's causal video VAE (`hunyuan_video_vae_bf16.safetensors`; Kandinsky 5's video
models sample in its latents): 16 latent channels, 8x spatial and 4x temporal compression, the first
frame on its own.

Architecture of Tencent's HunyuanVideo VAE (github.com/Tencent-Hunyuan/HunyuanVideo,
`hyvideo/vae`; diffusers' `AutoencoderKLHunyuanVideo` computes the same; ComfyUI runs it as its LDM
`Encoder` / `Decoder` with `conv3d` and `time_compress` 4): causal 3-D convolutions (replicate
padding: one pixel each side in space, two frames before in time), GroupNorm (32 groups) + SiLU
residual blocks (`layers_per_block` per encoder level, one more per decoder level), stride-2
downsampling convolutions (the first level in space only, the middle levels in time too) and
nearest upsampling (the first frame in space only) followed by a causal convolution, one
single-head attention over all latent positions in the middle of each half, and 1x1x1 quantisation
convolutions. Encoding keeps the distribution's mean (ComfyUI's regulariser without sampling).

The middle attention: Tencent's code and diffusers mask it causally by frame (a position sees its
own and earlier frames); ComfyUI's LDM attention attends over every position. This module does as
ComfyUI by default (the contract) and as the reference with `causal_attention=True`; the two agree
on one latent frame (images).

Names are those of the released file (Tencent's layout, which diffusers keeps):
`encoder.conv_in.conv`, `encoder.down_blocks.N.resnets.M.{norm1, conv1.conv, norm2, conv2.conv,
conv_shortcut.conv}`, `encoder.down_blocks.N.downsamplers.0.conv.conv`,
`encoder.mid_block.{resnets.0, attentions.0.{group_norm, to_q, to_k, to_v, to_out.0}, resnets.1}`,
`encoder.conv_norm_out`, `encoder.conv_out.conv`, `quant_conv`, `post_quant_conv`; the decoder alike
with `up_blocks.N` and `upsamplers.0`. ComfyUI's own names for it (LDM: `encoder.down.N.block.M`,
`mid.attn_1.{norm, q, k, v, proj_out}`, `nin_shortcut`, `norm_out`, attention as 1x1x1 convolutions)
are converted to these (`ldm_names`). Widths and depths are read from the weights.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.checkpoint.keys import KeyConversion
from comfy_core.checkpoint.renamed import RenamedCheckpoint
from comfy_core.models.vae import VAEConfigError
from comfy_core.models.video_vae_surface import VideoVAESurface
from comfy_core.models.weight_shapes import numbered_children

MARKER = "decoder.mid_block.attentions.0.to_q.weight"  # with 5-D `decoder.conv_in.conv.weight`
LDM_MARKER = "decoder.mid.attn_1.q.weight"  # ComfyUI's names: 5-D (1x1x1 convolution)
SPATIAL, TEMPORAL = 8, 4
GROUPS = 32
EPS = 1e-6


@dataclass(frozen=True)
class HunyuanVideoVAEConfig:
    block_out_channels: tuple[int, ...] = (128, 256, 512, 512)
    latent_channels: int = 16
    layers_per_block: int = 2
    in_channels: int = 3
    out_channels: int = 3
    norm_groups: int = GROUPS
    causal_attention: bool = False  # ComfyUI's full attention; True: Tencent's / diffusers' frame mask

    def __post_init__(self) -> None:
        if len(self.block_out_channels) != 4:
            raise VAEConfigError(f"HunyuanVideo VAE: {len(self.block_out_channels)} levels; the 8x / 4x layout has 4")
        if any(c % self.norm_groups for c in self.block_out_channels):
            raise VAEConfigError(f"HunyuanVideo VAE: widths {self.block_out_channels} are not multiples of the "
                                 f"{self.norm_groups} norm groups")

    @property
    def spatial_ratio(self) -> int:
        return SPATIAL

    @property
    def temporal_ratio(self) -> int:
        return TEMPORAL

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "HunyuanVideoVAEConfig":
        def shape(key: str) -> tuple[int, ...]:
            try:
                return tuple(tensors[prefix + key].shape)
            except KeyError:
                raise VAEConfigError(f"HunyuanVideo VAE: key {prefix + key!r} is missing") from None

        levels = sorted(numbered_children(tensors, prefix + "encoder.down_blocks."))
        if levels != list(range(len(levels))) or not levels:
            raise VAEConfigError(f"HunyuanVideo VAE: encoder levels {levels} are not 0..n-1")
        widths = tuple(shape(f"encoder.down_blocks.{i}.resnets.0.conv1.conv.weight")[0] for i in levels)
        layers = len(numbered_children(tensors, prefix + "encoder.down_blocks.0.resnets."))
        conv_in = shape("decoder.conv_in.conv.weight")
        if len(conv_in) != 5:
            raise VAEConfigError(f"HunyuanVideo VAE: decoder.conv_in is {conv_in}, not a 3-D convolution")
        return cls(block_out_channels=widths, latent_channels=conv_in[1], layers_per_block=layers,
                   in_channels=shape("encoder.conv_in.conv.weight")[1], out_channels=shape("decoder.conv_out.conv.weight")[0])


def is_hunyuan_video_vae(names: Any, prefix: str = "") -> bool:
    """The file holds this VAE in the released names (a GroupNorm middle attention, `conv` wrappers)."""
    return (prefix + MARKER in names and prefix + "decoder.conv_in.conv.weight" in names
            and prefix + "decoder.mid_block.resnets.0.norm1.weight" in names)


def is_ldm_hunyuan_video_vae(names: Any, shapes: Mapping[str, Any], prefix: str = "") -> bool:
    """The file holds this VAE in ComfyUI's LDM names (`conv` wrappers, GroupNorm `norm1.weight`, no
    upsampler at level 0, which HunyuanVideo 1.5's VAE has)."""
    key = prefix + LDM_MARKER
    return (key in names and prefix + "decoder.conv_in.conv.weight" in names
            and prefix + "decoder.mid.block_1.norm1.weight" in names and len(tuple(shapes[key].shape)) == 5
            and prefix + "decoder.up.0.upsample.conv.conv.weight" not in names)


def ldm_names(names: Any, prefix: str = "") -> dict[str, str]:
    """{released name: ComfyUI LDM name} for a file in ComfyUI's names (see the module doc); the
    attention's 1x1x1 convolutions are read as the linear layers they are (`ldm_attention_keys`)."""
    levels = sorted(numbered_children(names, prefix + "decoder.up."))
    top = max(levels) if levels else 0
    out: dict[str, str] = {}
    for name in names:
        if not name.startswith(prefix):
            continue
        key = name[len(prefix):]
        new = key
        new = re.sub(r"^encoder\.down\.(\d+)\.block\.(\d+)\.", r"encoder.down_blocks.\1.resnets.\2.", new)
        new = re.sub(r"^encoder\.down\.(\d+)\.downsample\.", r"encoder.down_blocks.\1.downsamplers.0.", new)
        up = re.match(r"^decoder\.up\.(\d+)\.(block|upsample)\.(.*)$", new)
        if up:  # LDM's up levels are numbered from the finest; the released ones from the coarsest
            level = top - int(up.group(1))
            rest = up.group(3)
            new = (f"decoder.up_blocks.{level}.resnets.{rest}" if up.group(2) == "block"
                   else f"decoder.up_blocks.{level}.upsamplers.0.{rest}")
        for half in ("encoder", "decoder"):
            new = new.replace(f"{half}.mid.block_1.", f"{half}.mid_block.resnets.0.")
            new = new.replace(f"{half}.mid.block_2.", f"{half}.mid_block.resnets.1.")
            new = new.replace(f"{half}.mid.attn_1.norm.", f"{half}.mid_block.attentions.0.group_norm.")
            for ldm, released in (("q", "to_q"), ("k", "to_k"), ("v", "to_v"), ("proj_out", "to_out.0")):
                new = new.replace(f"{half}.mid.attn_1.{ldm}.", f"{half}.mid_block.attentions.0.{released}.")
            new = new.replace(f"{half}.norm_out.", f"{half}.conv_norm_out.")
        new = new.replace(".nin_shortcut.", ".conv_shortcut.")
        out[new] = name
    return out


# ComfyUI's names keep the middle attention as 1x1x1 convolutions: read as the linear layers.
ATTENTION_CONV_TO_LINEAR = KeyConversion(
    name="HunyuanVideo VAE attention 1x1x1 conv -> linear",
    pattern=r"(^|\.)(encoder|decoder)\.(mid_block\.attentions\.0\.(to_q|to_k|to_v|to_out\.0)|mid\.attn_1\.(q|k|v|proj_out))"
            r"\.weight$",
    from_rank=5, to_rank=2)
VAE_PREFIXES = ("first_stage_model.", "vae.", "")


def vae_view(checkpoint: Any) -> tuple[Any, str] | None:
    """(the file under the released names, prefix) when it holds this VAE, else None: the released
    layout under any of `VAE_PREFIXES`, or ComfyUI's LDM names renamed (the prefix then folded in)."""
    names = checkpoint.tensors
    for prefix in VAE_PREFIXES:
        if is_hunyuan_video_vae(names, prefix):
            return checkpoint, prefix
    for prefix in VAE_PREFIXES:
        if is_ldm_hunyuan_video_vae(names, names, prefix):
            return RenamedCheckpoint(checkpoint, ldm_names(names, prefix)), ""
    return None


class CausalConv3d(nn.Module):
    """A 3-D convolution (`conv`) after replicate padding: `k // 2` each side in space, `k - 1`
    frames before in time, none after."""

    def __init__(self, cin: int, cout: int, kernel: int = 3, stride: tuple[int, int, int] = (1, 1, 1)) -> None:
        super().__init__()
        self.padding = (kernel // 2, kernel // 2, kernel // 2, kernel // 2, kernel - 1, 0)
        self.conv = nn.Conv3d(cin, cout, kernel, stride=stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if any(self.padding):
            x = F.pad(x, self.padding, mode="replicate")
        return self.conv(x)


class ResnetBlock(nn.Module):
    """GroupNorm, SiLU, causal conv, twice; a 1x1x1 `conv_shortcut` when the width changes."""

    def __init__(self, cin: int, cout: int, groups: int) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, cin, eps=EPS)
        self.conv1 = CausalConv3d(cin, cout)
        self.norm2 = nn.GroupNorm(groups, cout, eps=EPS)
        self.conv2 = CausalConv3d(cout, cout)
        self.conv_shortcut = CausalConv3d(cin, cout, kernel=1) if cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return (x if self.conv_shortcut is None else self.conv_shortcut(x)) + h


class Attention(nn.Module):
    """One head as wide as the channels over every latent position (`group_norm`, `to_q`, `to_k`,
    `to_v`, `to_out.0`), residual; frame-causal when `causal`."""

    def __init__(self, dim: int, groups: int, causal: bool) -> None:
        super().__init__()
        self.causal = causal
        self.group_norm = nn.GroupNorm(groups, dim, eps=EPS)
        self.to_q = nn.Linear(dim, dim)
        self.to_k = nn.Linear(dim, dim)
        self.to_v = nn.Linear(dim, dim)
        self.to_out = nn.ModuleList([nn.Linear(dim, dim)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, t, h, w = x.shape
        tokens = self.group_norm(x).permute(0, 2, 3, 4, 1).reshape(b, 1, t * h * w, c)  # [B, 1, N, C]
        mask = None
        if self.causal and t > 1:
            frame = torch.arange(t, device=x.device).repeat_interleave(h * w)
            mask = frame[None, :] <= frame[:, None]  # query row sees keys of its own and earlier frames
        out = F.scaled_dot_product_attention(self.to_q(tokens), self.to_k(tokens), self.to_v(tokens), attn_mask=mask)
        out = self.to_out[0](out).reshape(b, t, h, w, c).permute(0, 4, 1, 2, 3)
        return x + out


class MidBlock(nn.Module):
    def __init__(self, dim: int, groups: int, causal: bool) -> None:
        super().__init__()
        self.resnets = nn.ModuleList([ResnetBlock(dim, dim, groups), ResnetBlock(dim, dim, groups)])
        self.attentions = nn.ModuleList([Attention(dim, groups, causal)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.resnets[1](self.attentions[0](self.resnets[0](x)))


class Resample(nn.Module):
    """`conv` (a causal convolution) holder: a downsampler (stride) or an upsampler (nearest first)."""

    def __init__(self, dim: int, stride: tuple[int, int, int] = (1, 1, 1)) -> None:
        super().__init__()
        self.conv = CausalConv3d(dim, dim, stride=stride)


def _levels(count: int) -> list[tuple[bool, bool]]:
    """(space, time) resampling after each of `count` levels for 8x / 4x: space at the first three,
    time at the second and third (Tencent's rule for a temporal ratio of 4)."""
    space_layers, time_layers = int(math.log2(SPATIAL)), int(math.log2(TEMPORAL))
    return [(i < space_layers, count - 1 - time_layers <= i < count - 1) for i in range(count)]


class Encoder(nn.Module):
    def __init__(self, config: HunyuanVideoVAEConfig) -> None:
        super().__init__()
        widths, groups = config.block_out_channels, config.norm_groups
        self.conv_in = CausalConv3d(config.in_channels, widths[0])
        self.down_blocks = nn.ModuleList()
        cin = widths[0]
        for width, (space, time) in zip(widths, _levels(len(widths))):
            level = nn.Module()
            level.resnets = nn.ModuleList([ResnetBlock(cin if j == 0 else width, width, groups)
                                           for j in range(config.layers_per_block)])
            if space or time:
                level.downsamplers = nn.ModuleList([Resample(width, (2 if time else 1, 2 if space else 1,
                                                                     2 if space else 1))])
            self.down_blocks.append(level)
            cin = width
        self.mid_block = MidBlock(widths[-1], groups, config.causal_attention)
        self.conv_norm_out = nn.GroupNorm(groups, widths[-1], eps=EPS)
        self.conv_out = CausalConv3d(widths[-1], 2 * config.latent_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv_in(x)
        for level in self.down_blocks:
            for block in level.resnets:
                x = block(x)
            if hasattr(level, "downsamplers"):
                x = level.downsamplers[0].conv(x)
        x = self.mid_block(x)
        return self.conv_out(F.silu(self.conv_norm_out(x)))


class Decoder(nn.Module):
    def __init__(self, config: HunyuanVideoVAEConfig) -> None:
        super().__init__()
        widths, groups = tuple(reversed(config.block_out_channels)), config.norm_groups
        self.conv_in = CausalConv3d(config.latent_channels, widths[0])
        self.mid_block = MidBlock(widths[0], groups, config.causal_attention)
        self.up_blocks = nn.ModuleList()
        self.scales: list[tuple[int, int, int]] = []
        cin = widths[0]
        for width, (space, time) in zip(widths, _levels(len(widths))):
            level = nn.Module()
            level.resnets = nn.ModuleList([ResnetBlock(cin if j == 0 else width, width, groups)
                                           for j in range(config.layers_per_block + 1)])
            self.scales.append((2 if time else 1, 2 if space else 1, 2 if space else 1))
            if space or time:
                level.upsamplers = nn.ModuleList([Resample(width)])
            self.up_blocks.append(level)
            cin = width
        self.conv_norm_out = nn.GroupNorm(groups, widths[-1], eps=EPS)
        self.conv_out = CausalConv3d(widths[-1], config.out_channels)

    @staticmethod
    def _upsample(x: torch.Tensor, scale: tuple[int, int, int]) -> torch.Tensor:
        """Nearest upsampling; the first frame in space only (it stays one frame)."""
        first = F.interpolate(x[:, :, 0], scale_factor=scale[1:], mode="nearest").unsqueeze(2)
        if x.shape[2] == 1:
            return first
        rest = F.interpolate(x[:, :, 1:], scale_factor=scale, mode="nearest")
        return torch.cat((first, rest), dim=2)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        x = self.mid_block(self.conv_in(z))
        for level, scale in zip(self.up_blocks, self.scales):
            for block in level.resnets:
                x = block(x)
            if hasattr(level, "upsamplers"):
                x = level.upsamplers[0].conv(self._upsample(x, scale))
        return self.conv_out(F.silu(self.conv_norm_out(x)))


class HunyuanVideoVAE(VideoVAESurface):
    """The VAE with the video-VAE surface our `VaePatcher` reads (`encode_raw`, `decode_raw`,
    `downscale_ratio`, `temporal_ratio`, `latent_channels`, ...)."""

    label = "HunyuanVideo"
    timestep_conditioning = False

    def __init__(self, config: HunyuanVideoVAEConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder = Encoder(config)
        self.decoder = Decoder(config)
        self.quant_conv = nn.Conv3d(2 * config.latent_channels, 2 * config.latent_channels, 1)
        self.post_quant_conv = nn.Conv3d(config.latent_channels, config.latent_channels, 1)

    def with_causal_attention(self, causal: bool) -> "HunyuanVideoVAE":
        """This VAE (same module) with the middle attention frame-causal or not (see the module doc)."""
        self.config = replace(self.config, causal_attention=causal)
        for half in (self.encoder, self.decoder):
            half.mid_block.attentions[0].causal = causal
        return self

    @property
    def out_channels(self) -> int:
        return self.config.out_channels

    def _dtype(self) -> torch.dtype:
        return self.encoder.conv_in.conv.weight.dtype

    def encode_raw(self, x: torch.Tensor) -> torch.Tensor:
        """`[B, 3, 4k + 1, H, W]` in -1..1 -> the latent mean `[B, 16, k + 1, H/8, W/8]`."""
        frames = x.shape[2]
        if (frames - 1) % self.temporal_ratio:
            raise VAEConfigError(f"HunyuanVideo VAE.encode: {frames} frames; the VAE takes 1 + {self.temporal_ratio} "
                                 f"x n frames (1, 5, 9, ...)")
        f = self.downscale_ratio
        if x.shape[3] % f or x.shape[4] % f:
            raise VAEConfigError(f"HunyuanVideo VAE.encode: frames {x.shape[4]}x{x.shape[3]} are not multiples of {f}")
        moments = self.quant_conv(self.encoder(x.to(self._dtype())))
        return moments[:, :self.latent_channels]

    def decode_raw(self, z: torch.Tensor, output_device: torch.device | str | None = None,
                   **_: Any) -> torch.Tensor:
        """`[B, 16, T', h, w]` -> `[B, 3, 4 (T' - 1) + 1, 8 h, 8 w]` in about -1..1 (unclamped)."""
        out = self.decoder(self.post_quant_conv(z.to(self._dtype())))
        return out if output_device is None else out.to(output_device)

    def working_bytes(self, pixels: int, frames: int, dtype: torch.dtype) -> int:
        """Our estimate of a decode's working memory: the whole clip at full resolution holds about
        eight tensors of the finest level's width."""
        size = torch.empty((), dtype=dtype).element_size()
        channels = self.decoder.conv_out.conv.in_channels
        return int(8 * channels * frames * pixels * size + 3 * 4 * frames * pixels * size)


__all__ = ["ATTENTION_CONV_TO_LINEAR", "HunyuanVideoVAE", "HunyuanVideoVAEConfig", "LDM_MARKER", "MARKER", "is_hunyuan_video_vae",
           "is_ldm_hunyuan_video_vae", "ldm_names", "vae_view"]
