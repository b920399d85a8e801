"""LTX-Video 0.9.x's causal video VAE (Lightricks' `CausalVideoAutoencoder`).

Architecture of LTX-Video (HaCohen et al. 2024, arXiv 2501.00103; github.com/Lightricks/LTX-Video
`ltx_video/models/autoencoders/causal_video_autoencoder.py`): pixels in -1..1 are cut into 4x4
patches (48 channels), a causal 3-D convolutional encoder (first frame replicated as temporal
padding) compresses 32x in space and 8x in time to 128 channels (the posterior mean, normalised
per channel with the file's `per_channel_statistics`), and a non-causal decoder inverts it
(depth-to-space upsampling; from 0.9.1 on conditioned on a timestep: adaLN-style scale / shift in
every residual block and before the output convolution, with a little noise mixed into the
latent and injected per channel). Names are those of ComfyUI's `comfy/ldm/lightricks/vae/
causal_video_autoencoder.py` (`VideoVAE`: `encoder.*`, `decoder.*`, `per_channel_statistics.*`);
written here, with its behaviour:

- The block layout is read from the weights (`LTXVVAEConfig.detect_from_weights`): ComfyUI's
  0.9.0 / 0.9.1 / 0.9.5+ configs (`res_x`, `res_x_y`, `compress_all`, `compress_*_res`) and any
  widths, so tiny test files load. A plain strided convolution compresses all three axes (the
  stride is not in the weights; ComfyUI's configs use `compress_all` only); a space-to-depth
  downsampler's stride follows from its channel counts, and so does a decoder upsampler's
  (2x2x2, 1x2x2 or 2x1x1), residual when it narrows the channels (ComfyUI's 0.9.1+ configs;
  0.9.0's keep them). What the weights cannot tell comes from the file's `config` metadata when
  it has a `vae` section, as ComfyUI reads it (`LTXVVAEConfig.with_file_config`): LTX-2 / 2.3's
  decoder has plain upsamplers that narrow, space-only and time-only ones, zero padding.
- Spatial padding: zeros in the encoder, reflect in the decoder (ComfyUI's defaults).
- `decode_raw(z, timestep=0.05, noise_scale=0.025)`: ComfyUI's `VideoVAE.decode`; the noise
  (latent and injected) comes from torch's global generator, as ComfyUI's.
"""
from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.models.unet_blocks import timestep_embedding
from comfy_core.models.vae import VAEConfigError
from comfy_core.models.video_vae_surface import VideoVAESurface

MARKER = "decoder.up_blocks.0.res_blocks.0.conv1.conv.weight"  # ComfyUI's test for an LTXV VAE
STATISTICS = ("std-of-means", "mean-of-means", "mean-of-stds", "mean-of-stds_over_std-of-means", "channel")
DECODE_TIMESTEP, DECODE_NOISE_SCALE = 0.05, 0.025  # ComfyUI's VideoVAE.decode defaults
# A depth-to-space upsampler's convolution widens by its stride's volume over its output width.
_UPSAMPLER_KIND = {8: "compress_all", 4: "compress_space", 2: "compress_time"}


@dataclass(frozen=True)
class LTXVVAEConfig:
    """The block layout (ComfyUI's config entries) read from the weights."""

    patch_size: int = 4
    latent_channels: int = 128
    encoder_width: int = 128
    encoder_blocks: tuple[tuple[str, int], ...] = ()  # (kind, layers or output width)
    latent_log_var: str = "uniform"
    decoder_width: int = 512
    # In the decoder's order (ComfyUI's list reversed): ("res_x", layers, inject_noise),
    # ("res_x_y", output width, inject_noise), or an upsampler ("compress_all" | "compress_space" |
    # "compress_time", output width, residual).
    decoder_blocks: tuple[tuple[str, int, bool], ...] = ()
    causal_decoder: bool = False
    timestep_conditioning: bool = False
    norm_layer: str = "pixel_norm"
    encoder_padding: str = "zeros"
    decoder_padding: str = "reflect"
    spatial_ratio: int = 32
    temporal_ratio: int = 8

    @property
    def downscale(self) -> int:
        """Pixels per latent pixel along each side (the loader's check against the family)."""
        return self.spatial_ratio

    @property
    def embed_dim(self) -> int:
        return self.latent_channels

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "", **overrides: Any) -> "LTXVVAEConfig":
        def shape(key: str) -> tuple[int, ...]:
            try:
                return tuple(tensors[prefix + key].shape)
            except KeyError:
                raise VAEConfigError(f"LTX-Video VAE key {prefix + key!r} is missing") from None

        def children(group: str) -> dict[int, set[str]]:
            found: dict[int, set[str]] = {}
            pattern = re.compile(re.escape(prefix + group) + r"\.(\d+)\.(.+)$")
            for name in tensors:
                m = pattern.match(name)
                if m:
                    found.setdefault(int(m.group(1)), set()).add(m.group(2))
            if sorted(found) != list(range(len(found))):
                raise VAEConfigError(f"LTX-Video VAE: {prefix}{group} is not numbered 0..n-1: {sorted(found)}")
            return found

        width, pixel_in = shape("encoder.conv_in.conv.weight")[:2]
        patch = math.isqrt(pixel_in // 3)
        if patch * patch * 3 != pixel_in:
            raise VAEConfigError(f"LTX-Video VAE: encoder.conv_in takes {pixel_in} channels, not 3 x a square patch")
        latent = shape("decoder.conv_in.conv.weight")[1]
        channels, encoder_blocks, space, time = width, [], 1, 1
        down = children("encoder.down_blocks")
        for i in range(len(down)):
            names, base = down[i], f"encoder.down_blocks.{i}."
            if any(n.startswith("res_blocks.") for n in names):
                encoder_blocks.append(("res_x", len({n.split(".")[1] for n in names if n.startswith("res_blocks.")})))
            elif "conv1.conv.weight" in names:
                channels = shape(base + "conv1.conv.weight")[0]
                encoder_blocks.append(("res_x_y", channels))
            elif "conv.conv.weight" in names:  # space-to-depth: its stride from its channel counts
                conv_out = shape(base + "conv.conv.weight")[0]
                following = cls._next_width(shape, down, i + 1, "encoder")
                stride = following // conv_out
                kind = {8: "compress_all_res", 4: "compress_space_res", 2: "compress_time_res"}.get(stride)
                if kind is None:
                    raise VAEConfigError(f"LTX-Video VAE: {base}conv cannot be a space-to-depth downsampler")
                space *= 1 if kind == "compress_time_res" else 2
                time *= 1 if kind == "compress_space_res" else 2
                channels = following
                encoder_blocks.append((kind, channels))
            elif "conv.weight" in names:
                channels = shape(base + "conv.weight")[0]
                encoder_blocks.append(("compress_all", channels))
                space, time = space * 2, time * 2
            else:
                raise VAEConfigError(f"LTX-Video VAE: unknown encoder block {base} ({sorted(names)[:3]})")
        out = shape("encoder.conv_out.conv.weight")[0]
        log_var = {2 * latent: "per_channel", latent + 1: "uniform", latent: "none"}.get(out)
        if log_var is None:
            raise VAEConfigError(f"LTX-Video VAE: encoder.conv_out gives {out} channels for {latent} latent channels")
        decoder_width = shape("decoder.conv_in.conv.weight")[0]
        decoder_blocks, channels = [], decoder_width
        up = children("decoder.up_blocks")
        for i in range(len(up)):
            names, base = up[i], f"decoder.up_blocks.{i}."
            if any(n.startswith("res_blocks.") for n in names):
                layers = len({n.split(".")[1] for n in names if n.startswith("res_blocks.")})
                decoder_blocks.append(("res_x", layers, "res_blocks.0.per_channel_scale1" in names))
            elif "conv1.conv.weight" in names:
                channels = shape(base + "conv1.conv.weight")[0]
                decoder_blocks.append(("res_x_y", channels, "per_channel_scale1" in names))
            elif "conv.conv.weight" in names:  # depth-to-space: its stride from its channel counts
                conv_out = shape(base + "conv.conv.weight")[0]
                following = cls._next_width(shape, up, i + 1, "decoder", "up_blocks")
                kind = _UPSAMPLER_KIND.get(conv_out // following) if conv_out % following == 0 else None
                if kind is None or channels % following:
                    raise VAEConfigError(f"LTX-Video VAE: {base}conv gives {conv_out} channels from {channels}, "
                                         f"then {following}: not a depth-to-space upsampler")
                # Residual when it narrows (0.9.1+); the weights cannot tell, the file's config can.
                decoder_blocks.append((kind, following, following < channels))
                channels = following
            else:
                raise VAEConfigError(f"LTX-Video VAE: unknown decoder block {base} ({sorted(names)[:3]})")
        norm = "group_norm" if prefix + "decoder.up_blocks.0.res_blocks.0.norm1.weight" in tensors else "pixel_norm"
        values = dict(patch_size=patch, latent_channels=latent, encoder_width=width, encoder_blocks=tuple(encoder_blocks),
                      latent_log_var=log_var, decoder_width=decoder_width, decoder_blocks=tuple(decoder_blocks),
                      timestep_conditioning=prefix + "decoder.timestep_scale_multiplier" in tensors, norm_layer=norm,
                      spatial_ratio=patch * space, temporal_ratio=time)
        values.update(overrides)
        return cls(**values)

    def with_file_config(self, config: Mapping[str, Any]) -> "LTXVVAEConfig":
        """This layout with what the weights cannot say taken from the file's own description
        (ComfyUI's `VideoVAE` config: the `vae` section of a checkpoint's `config` metadata, as
        LTX-2's files carry): which upsamplers are residual, the noise injection, the padding
        and a causal decoder. LTX-2's decoder has plain (not residual) upsamplers that narrow
        the width and space-only / time-only ones, which the 0.9.x convention reads wrongly.
        Raises `VAEConfigError` when the description does not match the weights."""
        described = config.get("decoder_blocks", config.get("blocks"))
        if not isinstance(described, (list, tuple)):
            raise VAEConfigError("LTX-Video VAE: the file's config has no decoder_blocks list")
        blocks = []
        detected = list(self.decoder_blocks)
        if len(described) != len(detected):
            raise VAEConfigError(f"LTX-Video VAE: the file's config lists {len(described)} decoder blocks, "
                                 f"the weights hold {len(detected)}")
        for (kind, value, flag), entry in zip(detected, reversed(described)):
            if not (isinstance(entry, (list, tuple)) and len(entry) == 2 and isinstance(entry[0], str)):
                raise VAEConfigError(f"LTX-Video VAE: malformed decoder block {entry!r} in the file's config")
            name, params = entry[0], entry[1] if isinstance(entry[1], dict) else {}
            if name != kind:
                raise VAEConfigError(f"LTX-Video VAE: the file's config has {name!r} where the weights hold a "
                                     f"{kind!r} block")
            # Upsamplers take `residual` from the description; noise injection shows in the weights.
            blocks.append((kind, value, bool(params.get("residual", False)) if kind in _UPSAMPLER_KIND.values()
                           else flag))
        padding = config.get("spatial_padding_mode")
        if padding is not None and padding not in ("zeros", "reflect", "replicate", "circular"):
            raise VAEConfigError(f"LTX-Video VAE: unknown spatial_padding_mode {padding!r} in the file's config")
        return dataclasses.replace(
            self, decoder_blocks=tuple(blocks), causal_decoder=bool(config.get("causal_decoder", False)),
            encoder_padding=padding or self.encoder_padding, decoder_padding=padding or self.decoder_padding)

    @staticmethod
    def _next_width(shape: Any, blocks: dict[int, set[str]], start: int, side: str,
                    group: str = "down_blocks") -> int:
        """The input width of the block after a down- or upsampler (that sampler's output width)."""
        for j in range(start, len(blocks)):
            names, base = blocks[j], f"{side}.{group}.{j}."
            for key in ("res_blocks.0.conv1.conv.weight", "conv1.conv.weight", "conv.conv.weight", "conv.weight"):
                if key in names:
                    return shape(base + key)[1]
        return shape(f"{side}.conv_out.conv.weight")[1]


# --- building blocks ---

class CausalConv3d(nn.Module):
    """A 3x3x3 convolution padded in time by replicating the first frame (causal: two frames in
    front) or the first and last frames (one each side); spatial padding by `padding_mode`."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 3, stride: Any = 1, dilation: int = 1,
                 groups: int = 1, spatial_padding_mode: str = "zeros") -> None:
        super().__init__()
        self.time_kernel = kernel_size
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size, stride=stride, dilation=(dilation, 1, 1),
                              groups=groups, padding=(0, kernel_size // 2, kernel_size // 2),
                              padding_mode=spatial_padding_mode)

    @property
    def weight(self) -> torch.Tensor:
        """The convolution's weight (ComfyUI's `CausalConv3d.weight`)."""
        return self.conv.weight

    def forward(self, x: torch.Tensor, causal: bool = True) -> torch.Tensor:
        k = self.time_kernel
        if causal:
            x = torch.cat([x[:, :, :1].expand(-1, -1, k - 1, -1, -1), x], dim=2)
        else:
            side = (k - 1) // 2
            x = torch.cat([x[:, :, :1].expand(-1, -1, side, -1, -1), x, x[:, :, -1:].expand(-1, -1, side, -1, -1)],
                          dim=2)
        return self.conv(x)


def pixel_norm(x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Normalise each position's channel vector to unit RMS (Karras et al. 2018)."""
    return x / torch.sqrt(torch.mean(x * x, dim=1, keepdim=True) + eps)


class _ChannelNorm(nn.Module):
    """`pixel_norm` (no weights) or a 32-group GroupNorm (`group_norm` layouts)."""

    def __init__(self, kind: str, channels: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.group = nn.GroupNorm(32, channels, eps=eps) if kind == "group_norm" else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return pixel_norm(x) if self.group is None else self.group(x)


class _ChannelLayerNorm(nn.Module):
    """LayerNorm over the channel axis of `[B, C, T, H, W]` (`norm3.norm`)."""

    def __init__(self, channels: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(channels, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x.movedim(1, -1)).movedim(-1, 1)


class _TimeMLP(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.linear_1 = nn.Linear(256, dim)
        self.linear_2 = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(F.silu(self.linear_1(x)))


class TimeEmbedder(nn.Module):
    """Timesteps `[B]` -> `[B, dim]` (cos-first sinusoids of 256 channels, then an MLP)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.timestep_embedder = _TimeMLP(dim)

    def forward(self, t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return self.timestep_embedder(timestep_embedding(t, 256).to(dtype))


class ResnetBlock3D(nn.Module):
    """norm, (adaLN), SiLU, conv, (noise), norm, (adaLN), SiLU, conv + shortcut (LayerNorm and a
    1x1x1 convolution when the width changes)."""

    def __init__(self, cin: int, cout: int, norm: str, padding: str, inject_noise: bool = False,
                 timestep_conditioning: bool = False) -> None:
        super().__init__()
        self.norm1, self.norm2 = _ChannelNorm(norm, cin), _ChannelNorm(norm, cout)
        self.conv1 = CausalConv3d(cin, cout, spatial_padding_mode=padding)
        self.conv2 = CausalConv3d(cout, cout, spatial_padding_mode=padding)
        self.inject_noise = inject_noise
        if inject_noise:
            self.per_channel_scale1 = nn.Parameter(torch.zeros(cin, 1, 1))
            self.per_channel_scale2 = nn.Parameter(torch.zeros(cin, 1, 1))
        self.conv_shortcut = nn.Conv3d(cin, cout, 1) if cin != cout else None
        self.norm3 = _ChannelLayerNorm(cin) if cin != cout else None
        self.timestep_conditioning = timestep_conditioning
        if timestep_conditioning:
            self.scale_shift_table = nn.Parameter(torch.empty(4, cin))

    @staticmethod
    def _noise(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        spatial = torch.randn(x.shape[-2:], device=x.device, dtype=x.dtype)[None]  # [1, H, W]
        return x + (spatial * scale.to(x))[None, :, None]

    def forward(self, x: torch.Tensor, causal: bool = True, timestep: torch.Tensor | None = None) -> torch.Tensor:
        h = self.norm1(x)
        if self.timestep_conditioning:
            if timestep is None:
                raise VAEConfigError("LTX-Video VAE: a timestep-conditioned block needs a timestep")
            # timestep [B, 4 C, 1, 1, 1] -> four [B, C, 1, 1, 1]
            rows = self.scale_shift_table[None, ..., None, None, None].to(h) + timestep.reshape(
                x.shape[0], 4, -1, 1, 1, 1)
            shift1, scale1, shift2, scale2 = rows.unbind(dim=1)
            h = h * (1 + scale1) + shift1
        h = self.conv1(F.silu(h), causal=causal)
        if self.inject_noise:
            h = self._noise(h, self.per_channel_scale1)
        h = self.norm2(h)
        if self.timestep_conditioning:
            h = h * (1 + scale2) + shift2
        h = self.conv2(F.silu(h), causal=causal)
        if self.inject_noise:
            h = self._noise(h, self.per_channel_scale2)
        if self.conv_shortcut is not None:
            x = self.conv_shortcut(self.norm3(x))
        return x + h


class MidBlock3D(nn.Module):
    """`res_x`: residual blocks of one width, with a shared timestep embedder when conditioned."""

    def __init__(self, channels: int, layers: int, norm: str, padding: str, inject_noise: bool = False,
                 timestep_conditioning: bool = False) -> None:
        super().__init__()
        self.timestep_conditioning = timestep_conditioning
        if timestep_conditioning:
            self.time_embedder = TimeEmbedder(4 * channels)
        self.res_blocks = nn.ModuleList([ResnetBlock3D(channels, channels, norm, padding, inject_noise,
                                                       timestep_conditioning) for _ in range(layers)])

    def forward(self, x: torch.Tensor, causal: bool = True, timestep: torch.Tensor | None = None) -> torch.Tensor:
        embedded = None
        if self.timestep_conditioning:
            embedded = self.time_embedder(timestep.flatten(), x.dtype).view(x.shape[0], -1, 1, 1, 1)
        for block in self.res_blocks:
            x = block(x, causal=causal, timestep=embedded)
        return x


def _to_depth(x: torch.Tensor, stride: tuple[int, int, int]) -> torch.Tensor:
    """`[B, C, T*p1, H*p2, W*p3] -> [B, C*p1*p2*p3, T, H, W]` (channel-major, then p1, p2, p3)."""
    b, c, t, h, w = x.shape
    p1, p2, p3 = stride
    x = x.reshape(b, c, t // p1, p1, h // p2, p2, w // p3, p3)
    return x.permute(0, 1, 3, 5, 7, 2, 4, 6).reshape(b, c * p1 * p2 * p3, t // p1, h // p2, w // p3)


def _to_space(x: torch.Tensor, stride: tuple[int, int, int]) -> torch.Tensor:
    """The inverse of `_to_depth`."""
    b, c, t, h, w = x.shape
    p1, p2, p3 = stride
    x = x.reshape(b, c // (p1 * p2 * p3), p1, p2, p3, t, h, w)
    return x.permute(0, 1, 5, 2, 6, 3, 7, 4).reshape(b, c // (p1 * p2 * p3), t * p1, h * p2, w * p3)


class SpaceToDepthDownsample(nn.Module):
    """A convolution to `cout / prod(stride)` channels folded into depth, plus the input folded and
    averaged in groups (the residual); a temporal stride first repeats the first frame."""

    def __init__(self, cin: int, cout: int, stride: tuple[int, int, int], padding: str) -> None:
        super().__init__()
        self.stride = stride
        self.group_size = cin * math.prod(stride) // cout
        self.conv = CausalConv3d(cin, cout // math.prod(stride), spatial_padding_mode=padding)

    def forward(self, x: torch.Tensor, causal: bool = True) -> torch.Tensor:
        if self.stride[0] == 2:
            x = torch.cat([x[:, :, :1], x], dim=2)
        residual = _to_depth(x, self.stride)
        residual = residual.unflatten(1, (-1, self.group_size)).mean(dim=2)
        return _to_depth(self.conv(x, causal=causal), self.stride) + residual


class DepthToSpaceUpsample(nn.Module):
    """A convolution to `prod(stride) * cin / reduction` channels unfolded into space and time
    (the first frame dropped after a temporal doubling); `residual`: plus the input unfolded and
    repeated to the output width."""

    def __init__(self, cin: int, stride: tuple[int, int, int], residual: bool, reduction: int, padding: str) -> None:
        super().__init__()
        self.stride, self.residual, self.reduction = stride, residual, reduction
        self.conv = CausalConv3d(cin, math.prod(stride) * cin // reduction, spatial_padding_mode=padding)

    def forward(self, x: torch.Tensor, causal: bool = True) -> torch.Tensor:
        skip = None
        if self.residual:
            skip = _to_space(x, self.stride).repeat(1, math.prod(self.stride) // self.reduction, 1, 1, 1)
            if self.stride[0] == 2:
                skip = skip[:, :, 1:]
        out = _to_space(self.conv(x, causal=causal), self.stride)
        if self.stride[0] == 2:
            out = out[:, :, 1:]
        return out if skip is None else out + skip


def patchify(x: torch.Tensor, patch: int) -> torch.Tensor:
    """`[B, C, T, H*p, W*p] -> [B, C*p*p, T, H, W]`, channel order (c, width patch, height patch)."""
    if patch == 1:
        return x
    b, c, t, h, w = x.shape
    x = x.reshape(b, c, t, h // patch, patch, w // patch, patch)
    return x.permute(0, 1, 6, 4, 2, 3, 5).reshape(b, c * patch * patch, t, h // patch, w // patch)


def unpatchify(x: torch.Tensor, patch: int) -> torch.Tensor:
    """The inverse of `patchify`."""
    if patch == 1:
        return x
    b, c, t, h, w = x.shape
    x = x.reshape(b, c // (patch * patch), patch, patch, t, h, w)  # c, r (width), q (height)
    return x.permute(0, 1, 4, 5, 3, 6, 2).reshape(b, c // (patch * patch), t, h * patch, w * patch)


_STRIDES = {"compress_all_res": (2, 2, 2), "compress_space_res": (1, 2, 2), "compress_time_res": (2, 1, 1),
            "compress_all": (2, 2, 2), "compress_space": (1, 2, 2), "compress_time": (2, 1, 1)}


class Encoder(nn.Module):
    def __init__(self, config: LTXVVAEConfig) -> None:
        super().__init__()
        pad, norm = config.encoder_padding, config.norm_layer
        self.patch_size, self.latent_log_var = config.patch_size, config.latent_log_var
        channels = config.encoder_width
        self.conv_in = CausalConv3d(3 * config.patch_size ** 2, channels, spatial_padding_mode=pad)
        blocks: list[nn.Module] = []
        for kind, value in config.encoder_blocks:
            if kind == "res_x":
                blocks.append(MidBlock3D(channels, value, norm, pad))
            elif kind == "res_x_y":
                blocks.append(ResnetBlock3D(channels, value, norm, pad))
                channels = value
            elif kind == "compress_all":
                blocks.append(CausalConv3d(channels, value, stride=(2, 2, 2), spatial_padding_mode=pad))
                channels = value
            else:
                blocks.append(SpaceToDepthDownsample(channels, value, _STRIDES[kind], pad))
                channels = value
        self.down_blocks = nn.ModuleList(blocks)
        self.conv_norm_out = _ChannelNorm(norm, channels)
        out = {"per_channel": 2 * config.latent_channels, "uniform": config.latent_channels + 1,
               "none": config.latent_channels}[config.latent_log_var]
        self.conv_out = CausalConv3d(channels, out, spatial_padding_mode=pad)
        self.latent_channels = config.latent_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """`[B, 3, T, H, W]` -> the posterior mean `[B, latent, T', H/f, W/f]` (unnormalised)."""
        x = self.conv_in(patchify(x, self.patch_size))
        for block in self.down_blocks:
            x = block(x)
        x = self.conv_out(F.silu(self.conv_norm_out(x)))
        return x[:, :self.latent_channels]


class Decoder(nn.Module):
    def __init__(self, config: LTXVVAEConfig) -> None:
        super().__init__()
        pad, norm, cond = config.decoder_padding, config.norm_layer, config.timestep_conditioning
        self.patch_size, self.timestep_conditioning = config.patch_size, cond
        self.causal = config.causal_decoder
        channels = config.decoder_width
        self.conv_in = CausalConv3d(config.latent_channels, channels, spatial_padding_mode=pad)
        blocks: list[nn.Module] = []
        for kind, value, noise in config.decoder_blocks:
            if kind == "res_x":
                blocks.append(MidBlock3D(channels, value, norm, pad, noise, cond))
            elif kind == "res_x_y":
                blocks.append(ResnetBlock3D(channels, value, norm, pad, noise))
                channels = value
            else:  # an upsampler: (kind, output width, residual)
                blocks.append(DepthToSpaceUpsample(channels, _STRIDES[kind], noise, channels // value, pad))
                channels = value
        self.up_blocks = nn.ModuleList(blocks)
        self.conv_norm_out = _ChannelNorm(norm, channels)
        self.conv_out = CausalConv3d(channels, 3 * config.patch_size ** 2, spatial_padding_mode=pad)
        if cond:
            self.timestep_scale_multiplier = nn.Parameter(torch.tensor(1000.0))
            self.last_time_embedder = TimeEmbedder(2 * channels)
            self.last_scale_shift_table = nn.Parameter(torch.empty(2, channels))

    def forward(self, z: torch.Tensor, timestep: torch.Tensor | None = None) -> torch.Tensor:
        """`[B, latent, T', h, w]` (unnormalised) -> `[B, 3, 8 (T' - 1) + 1, 32 h, 32 w]`; the
        decoder is not causal unless its file says so (both ends of the time axis replicated)."""
        x = self.conv_in(z, causal=self.causal)
        scaled = None
        if self.timestep_conditioning:
            if timestep is None:
                raise VAEConfigError("LTX-Video VAE: this decoder is timestep-conditioned; pass a timestep")
            scaled = timestep.to(x) * self.timestep_scale_multiplier.to(x)
        for block in self.up_blocks:
            if isinstance(block, MidBlock3D):
                x = block(x, causal=self.causal, timestep=scaled)
            else:
                x = block(x, causal=self.causal)
        x = self.conv_norm_out(x)
        if self.timestep_conditioning:
            embedded = self.last_time_embedder(scaled.flatten(), x.dtype).view(x.shape[0], 2, -1, 1, 1, 1)
            rows = self.last_scale_shift_table[None, ..., None, None, None].to(x) + embedded
            shift, scale = rows.unbind(dim=1)
            x = x * (1 + scale) + shift
        return unpatchify(self.conv_out(F.silu(x), causal=self.causal), self.patch_size)


class PerChannelStatistics(nn.Module):
    """The latent statistics buffers (`std-of-means`, `mean-of-means`, ...; names with dashes, as
    in the files)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        for name in STATISTICS:
            self.register_buffer(name, torch.empty(channels))

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        mean, std = self.get_buffer("mean-of-means"), self.get_buffer("std-of-means")
        return (x - mean.view(1, -1, 1, 1, 1).to(x)) / std.view(1, -1, 1, 1, 1).to(x)

    def un_normalize(self, x: torch.Tensor) -> torch.Tensor:
        mean, std = self.get_buffer("mean-of-means"), self.get_buffer("std-of-means")
        return x * std.view(1, -1, 1, 1, 1).to(x) + mean.view(1, -1, 1, 1, 1).to(x)


class LTXVVAE(VideoVAESurface):
    """ComfyUI's `VideoVAE` for LTX-Video 0.9.x (see the module doc) with the video-VAE surface
    our `VaePatcher` reads (`encode_raw`, `decode_raw`, `downscale_ratio`, `temporal_ratio`, ...)."""

    label = "LTX-Video"

    def __init__(self, config: LTXVVAEConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder = Encoder(config)
        self.decoder = Decoder(config)
        self.per_channel_statistics = PerChannelStatistics(config.latent_channels)

    @property
    def out_channels(self) -> int:
        return 3

    @property
    def timestep_conditioning(self) -> bool:
        return self.config.timestep_conditioning

    def _dtype(self) -> torch.dtype:
        return self.encoder.conv_in.conv.weight.dtype

    def encode_raw(self, x: torch.Tensor) -> torch.Tensor:
        """`[B, 3, 8k + 1, H, W]` in -1..1 -> the normalised latent `[B, 128, k + 1, H/32, W/32]`."""
        frames = x.shape[2]
        if (frames - 1) % self.temporal_ratio:
            raise VAEConfigError(f"LTX-Video VAE.encode: {frames} frames; the VAE takes 1 + {self.temporal_ratio} "
                                 f"x n frames (1, 9, 17, ...)")
        f = self.downscale_ratio
        if x.shape[3] % f or x.shape[4] % f:
            raise VAEConfigError(f"LTX-Video VAE.encode: frames {x.shape[4]}x{x.shape[3]} are not multiples of {f}")
        return self.per_channel_statistics.normalize(self.encoder(x.to(self._dtype())))

    def decode_raw(self, z: torch.Tensor, output_device: torch.device | str | None = None,
                   timestep: float = DECODE_TIMESTEP, noise_scale: float = DECODE_NOISE_SCALE) -> torch.Tensor:
        """The normalised latent `[B, 128, T', h, w]` -> `[B, 3, 8 (T' - 1) + 1, 32 h, 32 w]` in
        about -1..1 (unclamped); a timestep-conditioned decoder first mixes `noise_scale` of
        Gaussian noise into the latent and is conditioned on `timestep`."""
        z = z.to(self._dtype())
        if self.timestep_conditioning and noise_scale:
            z = torch.randn_like(z) * noise_scale + (1.0 - noise_scale) * z
        t = None
        if self.timestep_conditioning:
            t = torch.full((z.shape[0],), float(timestep), device=z.device, dtype=z.dtype)
        out = self.decoder(self.per_channel_statistics.un_normalize(z), timestep=t)
        return out if output_device is None else out.to(output_device)

    def working_bytes(self, pixels: int, frames: int, dtype: torch.dtype) -> int:
        """Our estimate of a decode's working memory for `frames` output frames of `pixels` pixels:
        the whole clip goes through the decoder at once (it is not causal), and the widest
        full-resolution level (after the last upsampler, at 1/patch^2 of the pixels) holds about
        eight tensors of its width (input, norm, padded copy, conv output, the residual's
        copies); ComfyUI's figure is 900 x latent volume x 512 bytes per element."""
        size = torch.empty((), dtype=dtype).element_size()
        channels = self.decoder.conv_norm_out.group.num_channels if self.decoder.conv_norm_out.group is not None \
            else self.decoder.conv_out.conv.in_channels
        positions = frames * pixels // self.config.patch_size ** 2
        return int(8 * channels * positions * size + 3 * 4 * frames * pixels * size)
