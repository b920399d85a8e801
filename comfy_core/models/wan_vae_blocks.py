"""Building blocks shared by the Wan 2.1 and Wan 2.2 video VAEs (causal 3-D convolutions).

Wan (Wan Team 2025, "Wan: Open and Advanced Large-Scale Video Generative Models", sec. 3.1,
"Wan-VAE") is a causal 3-D VAE: every convolution pads only on the past side of the time axis, so
frame `t` of any layer depends on frames `<= t` of the input. That lets the video be processed in
chunks (encode: the first frame, then 4 frames at a time; decode: one latent frame at a time) with
each causal convolution carrying the last frames of its input over to the next chunk, which bounds
memory by the chunk rather than by the video length. Behaviour and parameter names follow the
original `wan/modules/vae.py` as ComfyUI's `comfy/ldm/wan/vae.py` loads it (`residual.0.gamma`,
`residual.2`, `resample.1`, `time_conv`, `to_qkv`, ...), so `wan_2.1_vae.safetensors` loads as it is.
Written here from that description; the per-layer chunk state lives in an explicit `FrameCache`
passed down the network instead of a list indexed by a running counter.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention import attention


class FrameCache:
    """What each causal layer carries from one chunk of frames to the next.

    `first` is True while the first chunk runs: the temporal resampling layers treat it apart
    (the first frame of a Wan video is encoded on its own). `tail(layer)`/`keep(layer, frames)`
    hold the last input frames of a layer, keyed by the layer object itself."""

    def __init__(self) -> None:
        self.first = True
        self._tails: dict[int, torch.Tensor] = {}

    def tail(self, layer: nn.Module) -> torch.Tensor | None:
        return self._tails.get(id(layer))

    def keep(self, layer: nn.Module, frames: torch.Tensor) -> None:
        # A copy, so the cache does not keep the whole chunk it was sliced from alive.
        self._tails[id(layer)] = frames.clone()

    def next_chunk(self) -> None:
        self.first = False


class CausalConv3d(nn.Conv3d):
    """A 3-D convolution padded with zeros on the past side of time only (2 * pad frames), and
    symmetrically in space. With a `FrameCache` the missing past frames come from the previous
    chunk's input, so processing chunk by chunk equals processing the whole stream at once."""

    takes_cache = True  # `run` hands it the FrameCache

    def __init__(self, cin: int, cout: int, kernel: int | tuple[int, int, int],
                 stride: int | tuple[int, int, int] = 1, padding: int | tuple[int, int, int] = 0) -> None:
        pad_t, pad_h, pad_w = (padding,) * 3 if isinstance(padding, int) else padding
        # Space is padded by the convolution itself (no padded copy of the input); time by hand.
        super().__init__(cin, cout, kernel, stride=stride, padding=(0, pad_h, pad_w))
        self.past = 2 * pad_t

    def forward(self, x: torch.Tensor, cache: FrameCache | None = None) -> torch.Tensor:  # x [B, C, T, H, W]
        if self.past == 0:
            return super().forward(x)
        previous = cache.tail(self) if cache is not None else None
        stream = x if previous is None else torch.cat([previous.to(x), x], dim=2)
        if cache is not None:
            cache.keep(self, stream[:, :, -self.past:])
        missing = self.past - (stream.shape[2] - x.shape[2])
        if missing > 0:
            stream = F.pad(stream, (0, 0, 0, 0, missing, 0))
        return super().forward(stream)


class RMSNorm(nn.Module):
    """`x / ||x||_channels * sqrt(C) * gamma`: RMS normalisation over the channel axis (dim 1).
    `video`: gamma is `[C, 1, 1, 1]` (5-D input), else `[C, 1, 1]` (per-frame 4-D input)."""

    def __init__(self, channels: int, video: bool = True) -> None:
        super().__init__()
        self.scale = channels ** 0.5
        self.gamma = nn.Parameter(torch.ones((channels, 1, 1, 1) if video else (channels, 1, 1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Half precision overflows in the sum of squares: normalise in float32 (as diffusers does).
        wide = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        # In place on the fresh normalised tensor: at 832x480 one activation is ~0.6 GB.
        return F.normalize(wide, dim=1).to(x.dtype).mul_(self.scale * self.gamma.to(x.dtype))


def _frames_as_batch(x: torch.Tensor) -> torch.Tensor:
    """[B, C, T, H, W] -> [B*T, C, H, W]."""
    b, c, t, h, w = x.shape
    return x.transpose(1, 2).reshape(b * t, c, h, w)


def _batch_as_frames(x: torch.Tensor, batch: int) -> torch.Tensor:
    """[B*T, C, H, W] -> [B, C, T, H, W]."""
    bt, c, h, w = x.shape
    return x.reshape(batch, bt // batch, c, h, w).transpose(1, 2)


def conv3x3(cin: int, cout: int, frames: int = 3) -> CausalConv3d:
    """The 3x3 spatial convolution over `frames` causal frames (3 in Wan; 1 in the one-frame image
    VAE of Qwen-Image 2.1, ComfyUI's `temporal_kernel`)."""
    return CausalConv3d(cin, cout, (frames, 3, 3), padding=(frames // 2, 1, 1))


def run(layer: nn.Module, x: torch.Tensor, cache: FrameCache) -> torch.Tensor:
    """Apply a layer, handing the cache to the causal ones (the rest are per-frame)."""
    if getattr(layer, "takes_cache", False):
        return layer(x, cache)
    return layer(x)


class ResidualBlock(nn.Module):
    """RMSNorm, SiLU, 3x3x3 causal conv, RMSNorm, SiLU, (dropout), 3x3x3 causal conv, plus the
    input (through a 1x1x1 conv when the width changes). Indices 0..6 of `residual` are the
    original's, so `residual.2` and `residual.6` name the convolutions."""

    takes_cache = True

    def __init__(self, cin: int, cout: int, frames: int = 3) -> None:
        super().__init__()
        # The SiLUs act in place on the norms' fresh outputs (one full-size activation fewer).
        self.residual = nn.Sequential(
            RMSNorm(cin), nn.SiLU(inplace=True), conv3x3(cin, cout, frames),
            RMSNorm(cout), nn.SiLU(inplace=True), nn.Identity(),  # dropout: inactive at inference
            conv3x3(cout, cout, frames))
        self.shortcut = CausalConv3d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor, cache: FrameCache) -> torch.Tensor:
        h = x
        for layer in self.residual:
            h = run(layer, h, cache)
        return h.add_(self.shortcut(x))  # h is the last convolution's own output


class AttentionBlock(nn.Module):
    """Single-head self-attention over the pixels of each frame (no attention across time)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm = RMSNorm(channels, video=False)
        self.to_qkv = nn.Conv2d(channels, channels * 3, 1)
        self.proj = nn.Conv2d(channels, channels, 1)

    def forward(self, x: torch.Tensor, cache: FrameCache | None = None) -> torch.Tensor:
        b, c, t, h, w = x.shape
        frames = self.norm(_frames_as_batch(x))  # [B*T, C, H, W]
        q, k, v = (p.flatten(2).transpose(1, 2).contiguous()
                   for p in self.to_qkv(frames).chunk(3, dim=1))  # each [B*T, HW, C]
        out = attention(q, k, v, 1).transpose(1, 2).reshape(b * t, c, h, w).contiguous()
        return x + _batch_as_frames(self.proj(out), b)


class Resample(nn.Module):
    """Spatial 2x up/down sampling per frame, and for the `*3d` modes 2x in time as well.

    - `downsample2d`/`downsample3d`: zero-pad right and bottom by one, 3x3 conv with stride 2.
      `downsample3d` then halves the frames with a (3, 1, 1) stride-2 conv over the last frame of
      the previous chunk and this chunk's frames; the first chunk (one frame) passes unchanged.
    - `upsample2d`/`upsample3d`: nearest 2x, 3x3 conv to `out_channels` (half the width in Wan
      2.1, the same in Wan 2.2). `upsample3d` first doubles the frames: a causal (3, 1, 1) conv
      to twice the channels whose two halves become two consecutive frames; the first chunk (the
      first latent frame) is not doubled, hence 1 + 4 (T - 1) frames out of T latent frames.
    """

    takes_cache = True

    MODES = ("upsample2d", "upsample3d", "downsample2d", "downsample3d")

    def __init__(self, channels: int, mode: str, out_channels: int | None = None, frames: int = 3) -> None:
        super().__init__()
        if mode not in self.MODES:
            raise ValueError(f"Resample mode must be one of {self.MODES}, got {mode!r}")
        self.mode = mode
        if mode.startswith("upsample"):
            # Index 1 is the convolution, as in the original (index 0 is the parameterless upsample).
            self.resample = nn.Sequential(_Nearest2x(), nn.Conv2d(channels, out_channels or channels, 3, padding=1))
            if mode == "upsample3d":
                self.time_conv = CausalConv3d(channels, channels * 2, (frames, 1, 1), padding=(frames // 2, 0, 0))
        else:
            self.resample = nn.Sequential(nn.ZeroPad2d((0, 1, 0, 1)), nn.Conv2d(channels, channels, 3, stride=2))
            if mode == "downsample3d":
                self.time_conv = CausalConv3d(channels, channels, (frames, 1, 1), stride=(2, 1, 1))

    def forward(self, x: torch.Tensor, cache: FrameCache) -> torch.Tensor:
        b = x.shape[0]
        if self.mode == "upsample3d" and not cache.first:
            doubled = self.time_conv(x, cache)  # [B, 2C, T, H, W]
            _, c2, t, h, w = doubled.shape
            # Channel half 0 is frame 2i, half 1 frame 2i + 1.
            x = doubled.reshape(b, 2, c2 // 2, t, h, w).permute(0, 2, 3, 1, 4, 5).reshape(b, c2 // 2, 2 * t, h, w)
        x = _batch_as_frames(self.resample(_frames_as_batch(x)), b)
        if self.mode == "downsample3d":
            previous = cache.tail(self)
            cache.keep(self, x[:, :, -1:])
            if not cache.first:
                x = self.time_conv(torch.cat([previous.to(x), x], dim=2))
        return x


class _Nearest2x(nn.Module):
    """Nearest-neighbour 2x upsampling of [N, C, H, W] (in float32 for half inputs, as diffusers)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wide = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        return F.interpolate(wide, scale_factor=2.0, mode="nearest-exact").to(x.dtype)


def middle(channels: int, frames: int = 3) -> nn.Sequential:
    """The middle of encoder and decoder: residual block, attention, residual block."""
    return nn.Sequential(ResidualBlock(channels, channels, frames), AttentionBlock(channels),
                         ResidualBlock(channels, channels, frames))


def head(channels: int, out_channels: int, frames: int = 3) -> nn.Sequential:
    """RMSNorm, SiLU, 3x3x3 causal conv to the output channels (`head.0`, `head.2`)."""
    return nn.Sequential(RMSNorm(channels), nn.SiLU(inplace=True), conv3x3(channels, out_channels, frames))


def patchify(x: torch.Tensor, patch: int) -> torch.Tensor:
    """[B, C, T, H, W] -> [B, C*p*p, T, H/p, W/p]; channel c*p*p + r*p + q takes pixel (q, r)
    of each p x p patch (row offset q, column offset r), the original Wan 2.2 order."""
    if patch == 1:
        return x
    b, c, t, h, w = x.shape
    x = x.reshape(b, c, t, h // patch, patch, w // patch, patch)  # b c t h q w r
    return x.permute(0, 1, 6, 4, 2, 3, 5).reshape(b, c * patch * patch, t, h // patch, w // patch)


def unpatchify(x: torch.Tensor, patch: int) -> torch.Tensor:
    """The inverse of `patchify`: [B, C*p*p, T, h, w] -> [B, C, T, h*p, w*p]."""
    if patch == 1:
        return x
    b, cpp, t, h, w = x.shape
    c = cpp // (patch * patch)
    x = x.reshape(b, c, patch, patch, t, h, w)  # b c r q t h w
    return x.permute(0, 1, 4, 5, 3, 6, 2).reshape(b, c, t, h * patch, w * patch)
