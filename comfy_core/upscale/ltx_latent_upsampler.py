"""LTX's latent upsampler: a small convolutional network that enlarges an LTX video latent
(spatially 2x, or by a rational factor, or temporally 2x) before a second, refining sampling pass.

Architecture of Lightricks' `LatentUpsampler` (LTX-Video 0.9.7 / 0.9.8 spatial and temporal
upscalers, LTX-2 `ltx-2-spatial-upscaler-x2-1.0`, LTX-2.3 `ltx-2.3-spatial-upscaler-x2-1.1`,
LTX-2.5 `ltx-2.5-latent-spatial-upscaler-x2-bf16-1.0`), as ComfyUI's `comfy/ldm/lightricks/
latent_upsampler.py` and diffusers' `pipelines/ltx/modeling_latent_upsampler.py` /
`pipelines/ltx2/latent_upsampler.py` define it; written here:

    latent [B, C, F, H, W] (un-normalised: the VAE's raw posterior mean)
      -> conv 3x3(x3) C -> M, GroupNorm(32), SiLU
      -> n residual blocks (conv, GroupNorm, SiLU, conv, GroupNorm, + input, SiLU)
      -> the upsampler (one of):
           spatial x2      per frame: conv2d M -> 4M, pixel shuffle 2x2        `upsampler.0`
           rational s      per frame: conv2d M -> p^2 M, pixel shuffle p x p,   `upsampler.conv`
                           then a fixed 5x5 binomial blur with stride q (s = p / q: 0.75, 1.5, 2, 4)
           temporal x2     conv3d M -> 2M, shuffle along time, first frame dropped
           both x2         conv3d M -> 8M, shuffle time and space, first frame dropped
      -> n residual blocks, conv 3x3(x3) M -> C

With `dims` 2 every convolution is 2-D and the frames are independent images (batch x frames);
with 3 the body is 3-D (zero padding 1 on every axis). A temporal upsampler turns F frames into
2F - 1, which keeps a causal VAE's 1 + 8k frame count valid.

LTX-2.0, 2.3 and 2.5 change only the configuration (widths, the rational resampler), not the
network: every released file carries it as JSON in its `config` metadata. Here the widths, depth,
dimensionality and upsampler kind are read from the tensor names and shapes
(`LTXLatentUpsamplerConfig.detect`), the metadata supplies what shapes cannot show (the rational
resampler's blur stride) and is checked against them.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, fields
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

# ComfyUI's LatentUpscaleModelLoader tells an LTX upsampler by this tensor.
MARKER = "post_upsample_res_blocks.0.conv2.bias"
GROUPS = 32  # every GroupNorm has 32 groups
# scale -> (pixel-shuffle factor p, blur stride q), scale = p / q (Lightricks' table)
RATIONAL_SCALES: dict[float, tuple[int, int]] = {0.75: (3, 4), 1.5: (3, 2), 2.0: (2, 1), 4.0: (4, 1)}
BLUR_TAPS = (1.0, 4.0, 6.0, 4.0, 1.0)  # binomial row 4: the anti-aliasing kernel before a stride


class LatentUpsamplerConfigError(ValueError):
    """Weights (or their `config` metadata) that do not describe an LTX latent upsampler this
    module can build; the message names what is wrong."""


@dataclass(frozen=True)
class LTXLatentUpsamplerConfig:
    """The upsampler's configuration, in the names of the files' `config` metadata."""

    in_channels: int = 128
    mid_channels: int = 512
    num_blocks_per_stage: int = 4
    dims: int = 3
    spatial_upsample: bool = True
    temporal_upsample: bool = False
    spatial_scale: float = 2.0
    rational_resampler: bool = False

    def __post_init__(self) -> None:
        if self.dims not in (2, 3):
            raise LatentUpsamplerConfigError(f"LTX latent upsampler: dims must be 2 or 3, got {self.dims}")
        if not (self.spatial_upsample or self.temporal_upsample):
            raise LatentUpsamplerConfigError("LTX latent upsampler: neither spatial_upsample nor temporal_upsample "
                                             "is set")
        if self.temporal_upsample and self.dims != 3:
            raise LatentUpsamplerConfigError("LTX latent upsampler: a temporal upsampler needs dims 3 (3-D "
                                             "convolutions)")
        if self.mid_channels % GROUPS or self.mid_channels <= 0:
            raise LatentUpsamplerConfigError(f"LTX latent upsampler: mid_channels {self.mid_channels} is not a "
                                             f"positive multiple of the {GROUPS} norm groups")
        if self.rational_resampler and self.spatial_upsample and not self.temporal_upsample \
                and float(self.spatial_scale) not in RATIONAL_SCALES:
            raise LatentUpsamplerConfigError(f"LTX latent upsampler: spatial_scale {self.spatial_scale} is not one "
                                             f"of {sorted(RATIONAL_SCALES)}")

    @property
    def uses_rational_resampler(self) -> bool:
        return self.rational_resampler and self.spatial_upsample and not self.temporal_upsample

    @property
    def factors(self) -> tuple[float, float]:
        """(time, space) factors: frames F -> time (F - 1) + 1, sides x space."""
        space = float(self.spatial_scale) if self.uses_rational_resampler else (2.0 if self.spatial_upsample else 1.0)
        return (2.0 if self.temporal_upsample else 1.0), space

    def kind(self) -> str:
        if self.spatial_upsample and self.temporal_upsample:
            return "spatiotemporal x2"
        if self.temporal_upsample:
            return "temporal x2"
        return f"spatial x{self.spatial_scale:g} (rational)" if self.uses_rational_resampler else "spatial x2"

    @classmethod
    def detect(cls, tensors: Mapping[str, Any], metadata: Mapping[str, str] | None = None,
               prefix: str = "") -> "LTXLatentUpsamplerConfig":
        """The configuration of the weights `tensors` (names under `prefix`; shapes are read, never
        data), completed and checked by the file's `config` metadata when there is one."""
        def shape(name: str) -> tuple[int, ...]:
            tensor = tensors.get(prefix + name)
            if tensor is None:
                raise LatentUpsamplerConfigError(f"LTX latent upsampler: tensor {prefix + name} is missing")
            return tuple(tensor.shape)

        initial = shape("initial_conv.weight")
        if len(initial) not in (4, 5):
            raise LatentUpsamplerConfigError(f"LTX latent upsampler: initial_conv.weight has shape {initial}, "
                                             f"not a 2-D or 3-D convolution")
        mid, channels, dims = initial[0], initial[1], len(initial) - 2
        blocks = _count(tensors, prefix, r"res_blocks\.(\d+)\.conv1\.weight")
        post = _count(tensors, prefix, r"post_upsample_res_blocks\.(\d+)\.conv1\.weight")
        if blocks != post:
            raise LatentUpsamplerConfigError(f"LTX latent upsampler: {blocks} residual blocks before the "
                                             f"upsampler but {post} after")
        meta = _metadata_config(metadata)
        spatial, temporal, rational, scale = True, False, False, 2.0
        if prefix + "upsampler.conv.weight" in tensors:  # the rational resampler
            out = shape("upsampler.conv.weight")[0]
            factor = math.isqrt(out // mid) if out % mid == 0 else 0
            if factor * factor * mid != out or factor not in {p for p, _ in RATIONAL_SCALES.values()}:
                raise LatentUpsamplerConfigError(f"LTX latent upsampler: upsampler.conv.weight makes {out} "
                                                 f"channels from {mid}, not a pixel shuffle of 2, 3 or 4")
            rational = True
            scales = [s for s, (p, _) in RATIONAL_SCALES.items() if p == factor]
            if "spatial_scale" in meta:
                scale = _number(meta["spatial_scale"], "spatial_scale")
                if scale not in scales:
                    raise LatentUpsamplerConfigError(f"LTX latent upsampler: the config's spatial_scale {scale:g} "
                                                     f"does not fit a pixel shuffle of {factor} (scales {scales})")
            elif len(scales) == 1:
                scale = scales[0]
            else:
                raise LatentUpsamplerConfigError(f"LTX latent upsampler: a pixel shuffle of {factor} is scale "
                                                 f"{' or '.join(f'{s:g}' for s in scales)}; the file has no "
                                                 f"config metadata saying which")
        else:
            up = shape("upsampler.0.weight")
            ratio = up[0] // mid if up[0] % mid == 0 else 0
            if len(up) == 4 and ratio == 4:
                pass  # spatial x2, per frame
            elif len(up) == 5 and ratio == 8:
                temporal = True
            elif len(up) == 5 and ratio == 2:
                spatial, temporal = False, True
            else:
                raise LatentUpsamplerConfigError(f"LTX latent upsampler: upsampler.0.weight has shape {up}, not "
                                                 f"a spatial (conv2d, 4x), temporal (conv3d, 2x) or "
                                                 f"spatiotemporal (conv3d, 8x) upsampler of width {mid}")
        config = cls(in_channels=channels, mid_channels=mid, num_blocks_per_stage=blocks, dims=dims,
                     spatial_upsample=spatial, temporal_upsample=temporal, spatial_scale=scale,
                     rational_resampler=rational)
        _check_against(config, meta)
        if shape("final_conv.weight")[:2] != (channels, mid):
            raise LatentUpsamplerConfigError(f"LTX latent upsampler: final_conv.weight has shape "
                                             f"{shape('final_conv.weight')}, expected {channels} x {mid} channels")
        return config


def _count(tensors: Mapping[str, Any], prefix: str, pattern: str) -> int:
    compiled = re.compile(re.escape(prefix) + pattern + "$")
    indices = {int(m.group(1)) for name in tensors if (m := compiled.match(name))}
    if indices != set(range(len(indices))):
        raise LatentUpsamplerConfigError(f"LTX latent upsampler: blocks {sorted(indices)} are not numbered 0..n-1")
    return len(indices)


def _metadata_config(metadata: Mapping[str, str] | None) -> dict[str, Any]:
    """The `config` JSON of the file's metadata ({} when absent)."""
    raw = (metadata or {}).get("config")
    if raw is None:
        return {}
    try:
        config = json.loads(raw)
    except (TypeError, ValueError) as exc:
        raise LatentUpsamplerConfigError(f"LTX latent upsampler: the config metadata is not JSON ({exc})") from None
    if not isinstance(config, dict):
        raise LatentUpsamplerConfigError(f"LTX latent upsampler: the config metadata is a {type(config).__name__}, "
                                         f"not an object")
    return config


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LatentUpsamplerConfigError(f"LTX latent upsampler: the config's {name} is {value!r}, not a number")
    return float(value)


def _check_against(config: LTXLatentUpsamplerConfig, meta: Mapping[str, Any]) -> None:
    """The metadata's entries must say what the weights say (a file whose config was edited
    without its tensors, or the reverse, is refused rather than run wrongly)."""
    for field in fields(config):
        if field.name not in meta or field.name == "spatial_scale":
            continue
        stated, found = meta[field.name], getattr(config, field.name)
        if field.name == "rational_resampler" and not (config.spatial_upsample and not config.temporal_upsample):
            continue  # no spatial resampler to choose: the flag means nothing
        if isinstance(found, bool):
            if not isinstance(stated, bool) or stated != found:
                raise LatentUpsamplerConfigError(f"LTX latent upsampler: the config says {field.name}={stated!r}, "
                                                 f"the weights say {found!r}")
        elif isinstance(stated, bool) or not isinstance(stated, (int, float)) or stated != found:
            raise LatentUpsamplerConfigError(f"LTX latent upsampler: the config says {field.name}={stated!r}, the "
                                             f"weights say {found!r}")


def pixel_shuffle(x: torch.Tensor, factors: tuple[int, ...]) -> torch.Tensor:
    """Channels `c * prod(factors)` folded into the first len(factors) axes after them, the
    channel index being `c * prod + i1 * (f2 ... fn) + ... + in` (einops `b (c p1 p2) h w ->
    b c (h p1) (w p2)`, `b (c p1 p2 p3) d h w -> b c (d p1) (h p2) (w p3)` and `b (c p1) f h w ->
    b c (f p1) h w`): [B, c * prod, *axes] -> [B, c, *(axis * factor), *rest]."""
    n = len(factors)
    b, channels, *axes = x.shape
    if len(axes) < n:
        raise ValueError(f"pixel_shuffle: {len(axes)} axes after the channels, {n} factors")
    head, rest = axes[:n], axes[n:]
    c = channels // math.prod(factors)
    x = x.reshape(b, c, *factors, *head, *rest)
    # [b, c, f1..fn, a1..an, rest...] -> [b, c, a1, f1, ..., an, fn, rest...]
    order = [0, 1]
    for i in range(n):
        order += [2 + n + i, 2 + i]
    order += [2 + 2 * n + i for i in range(len(rest))]
    x = x.permute(*order)
    return x.reshape(b, c, *(a * f for a, f in zip(head, factors)), *rest)


class ResBlock(nn.Module):
    """conv, GroupNorm, SiLU, conv, GroupNorm, then SiLU of the sum with the input."""

    def __init__(self, channels: int, dims: int) -> None:
        super().__init__()
        conv = nn.Conv2d if dims == 2 else nn.Conv3d
        self.conv1 = conv(channels, channels, kernel_size=3, padding=1)
        self.norm1 = nn.GroupNorm(GROUPS, channels)
        self.conv2 = conv(channels, channels, kernel_size=3, padding=1)
        self.norm2 = nn.GroupNorm(GROUPS, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.silu(self.norm1(self.conv1(x)))
        return F.silu(self.norm2(self.conv2(h)) + x)


def blur_kernel() -> torch.Tensor:
    """The normalised 5x5 binomial kernel `[1, 1, 5, 5]` (outer product of `BLUR_TAPS`)."""
    taps = torch.tensor(BLUR_TAPS, device="cpu")
    kernel = taps[:, None] * taps[None, :]
    return (kernel / kernel.sum())[None, None]


class BlurDownsample(nn.Module):
    """A fixed 5x5 binomial blur with stride `stride` over the last two axes of [N, C, H, W],
    each channel alone (anti-aliased downsampling); identity at stride 1. The kernel is a buffer,
    as in the files."""

    def __init__(self, stride: int) -> None:
        super().__init__()
        self.stride = stride
        self.register_buffer("kernel", blur_kernel())  # [1, 1, 5, 5]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1:
            return x
        c = x.shape[1]
        weight = self.kernel.to(x).expand(c, 1, *self.kernel.shape[-2:])
        return F.conv2d(x, weight, stride=self.stride, padding=self.kernel.shape[-1] // 2, groups=c)


class RationalResampler(nn.Module):
    """Scale the sides of [N, C, H, W] by p / q: conv to p^2 C channels, pixel shuffle p, blur
    and stride q."""

    def __init__(self, channels: int, scale: float) -> None:
        super().__init__()
        self.num, self.den = RATIONAL_SCALES[float(scale)]
        self.conv = nn.Conv2d(channels, self.num ** 2 * channels, kernel_size=3, padding=1)
        self.blur_down = BlurDownsample(self.den)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blur_down(pixel_shuffle(self.conv(x), (self.num, self.num)))


class Shuffle(nn.Module):
    """`pixel_shuffle` as a module (the second entry of the files' `upsampler.N` sequence)."""

    def __init__(self, factors: tuple[int, ...]) -> None:
        super().__init__()
        self.factors = factors

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return pixel_shuffle(x, self.factors)


class LTXLatentUpsampler(nn.Module):
    """The network of the module docstring; tensor names are the files' (ComfyUI's = diffusers')."""

    def __init__(self, config: LTXLatentUpsamplerConfig) -> None:
        super().__init__()
        self.config = config
        mid, dims = config.mid_channels, config.dims
        conv = nn.Conv2d if dims == 2 else nn.Conv3d
        self.initial_conv = conv(config.in_channels, mid, kernel_size=3, padding=1)
        self.initial_norm = nn.GroupNorm(GROUPS, mid)
        self.res_blocks = nn.ModuleList(ResBlock(mid, dims) for _ in range(config.num_blocks_per_stage))
        self.upsampler: nn.Module
        if config.temporal_upsample:
            factors = (2, 2, 2) if config.spatial_upsample else (2,)
            self.upsampler = nn.Sequential(nn.Conv3d(mid, math.prod(factors) * mid, kernel_size=3, padding=1),
                                           Shuffle(factors))
        elif config.uses_rational_resampler:
            self.upsampler = RationalResampler(mid, config.spatial_scale)
        else:
            self.upsampler = nn.Sequential(nn.Conv2d(mid, 4 * mid, kernel_size=3, padding=1), Shuffle((2, 2)))
        self.post_upsample_res_blocks = nn.ModuleList(ResBlock(mid, dims) for _ in range(config.num_blocks_per_stage))
        self.final_conv = conv(mid, config.in_channels, kernel_size=3, padding=1)

    def forward(self, latent: torch.Tensor) -> torch.Tensor:
        """[B, C, F, H, W] -> [B, C, F', H', W'] (see `LTXLatentUpsamplerConfig.factors`)."""
        if latent.ndim != 5 or latent.shape[1] != self.config.in_channels:
            raise LatentUpsamplerConfigError(f"LTX latent upsampler: expected a latent [B, {self.config.in_channels}, "
                                             f"F, H, W], got {tuple(latent.shape)}")
        b, _, frames = latent.shape[:3]
        x = latent
        if self.config.dims == 2:
            x = _frames_to_batch(x)  # [B F, C, H, W]
        x = F.silu(self.initial_norm(self.initial_conv(x)))
        for block in self.res_blocks:
            x = block(x)
        if self.config.temporal_upsample:
            x = self.upsampler(x)[:, :, 1:]  # [B, M, 2F - 1, ...]
        elif self.config.dims == 3:
            x = _batch_to_frames(self.upsampler(_frames_to_batch(x)), b, frames)
        else:
            x = self.upsampler(x)
        for block in self.post_upsample_res_blocks:
            x = block(x)
        x = self.final_conv(x)
        return _batch_to_frames(x, b, frames) if self.config.dims == 2 else x


def _frames_to_batch(x: torch.Tensor) -> torch.Tensor:
    """[B, C, F, H, W] -> [B F, C, H, W] (batch-major)."""
    return x.transpose(1, 2).flatten(0, 1)


def _batch_to_frames(x: torch.Tensor, batch: int, frames: int) -> torch.Tensor:
    """[B F, C, H, W] -> [B, C, F, H, W]."""
    return x.unflatten(0, (batch, frames)).transpose(1, 2)


def build(config: LTXLatentUpsamplerConfig, state: Mapping[str, torch.Tensor],
          dtype: torch.dtype) -> LTXLatentUpsampler:
    """The network of `config` with the weights `state` (names without prefix), in `dtype`, eval
    mode. Every tensor of the network must be in `state` and nothing else, except the blur
    kernel, a constant, which is computed when a file leaves it out."""
    from comfy_core.checkpoint.meta_build import build_on_meta

    module = build_on_meta(lambda: LTXLatentUpsampler(config))
    expected = module.state_dict()
    optional = {name for name in expected if name.endswith("blur_down.kernel")}
    missing = sorted(set(expected) - set(state) - optional)
    unexpected = sorted(set(state) - set(expected))
    problems = [f"missing {_few(missing)}" if missing else "", f"unexpected {_few(unexpected)}" if unexpected else ""]
    if missing or unexpected:
        raise LatentUpsamplerConfigError(f"LTX latent upsampler ({config.kind()}): "
                                         + "; ".join(p for p in problems if p))
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise LatentUpsamplerConfigError(f"LTX latent upsampler: {name} has shape {tuple(tensor.shape)}, the "
                                             f"network's is {tuple(expected[name].shape)}")
    full = {name: blur_kernel() for name in optional}
    full.update(state)
    module.load_state_dict({name: tensor.to(device="cpu", dtype=dtype) for name, tensor in full.items()}, assign=True)
    return module.eval()


def _few(names: list[str]) -> str:
    return str(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
