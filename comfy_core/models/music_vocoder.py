"""ACE-Step 1's vocoder and mel front end (ComfyUI 0.3.64's `comfy/ldm/ace/vae/music_vocoder.py`,
`music_log_mel.py`; ACE-Step's `ADaMoSHiFiGANV1`), written here from these descriptions:

- `LogMel`: magnitude STFT (n_fft 2048, Hann window 2048, hop 512, no centring, the signal
  reflect-padded by 768 on each side so a clip of S samples gives S / 512 frames,
  `sqrt(re^2 + im^2 + 1e-6)`), a Slaney-style mel filter bank (Slaney's Auditory Toolbox mel scale
  and area normalisation; 128 bands, 40 Hz .. 16 kHz at 44.1 kHz), `log(max(x, 1e-5))`;
- `Vocoder.backbone`: a ConvNeXt (Liu et al. 2022) 1-D encoder over the mel bands: a stem
  (replicate-padded k7 convolution, channels-first LayerNorm), between stages a LayerNorm and a
  1x1 convolution, blocks `x + gamma * pw2(GELU(pw1(LN(dwconv_k7(x)))))`, a final LayerNorm;
- `Vocoder.head`: a HiFi-GAN generator (Kong et al. 2020): weight-normed `conv_pre`, per
  up-sampling level SiLU, a transposed convolution and the mean of the multi-receptive-field
  residual blocks (`x += conv2(silu(conv1(silu(x))))` over dilations 1, 3, 5), SiLU, `conv_post`,
  tanh.

Widths, depths, kernels and strides are read from the weights (`VocoderConfig.detect_from_weights`);
weight-normed convolutions are stored either as `parametrizations.weight.original0 / 1` (torch's
parametrization, ComfyUI's modules; held so here too) or `weight_g / weight_v` (renamed on load,
`weight_norm_names`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.models.weight_shapes import count_numbered, shape_reader

SAMPLE_RATE = 44_100
N_FFT = 2048
HOP = 512
N_MELS = 128
F_MIN, F_MAX = 40.0, 16_000.0
RES_DILATIONS = (1, 3, 5)


class VocoderConfigError(ValueError):
    """A vocoder state dict whose names or shapes do not make the network."""


WN_G, WN_V = ".parametrizations.weight.original0", ".parametrizations.weight.original1"


def weight_norm_names(state: Mapping[str, Any]) -> dict[str, Any]:
    """Older weight-norm names (`X.weight_g` / `X.weight_v`) renamed to torch's parametrization's
    (`X.parametrizations.weight.original0` / `original1`), which the modules here hold."""
    out: dict[str, Any] = {}
    for name, value in state.items():
        if name.endswith(".weight_g"):
            name = name[:-len(".weight_g")] + WN_G
        elif name.endswith(".weight_v"):
            name = name[:-len(".weight_v")] + WN_V
        out[name] = value
    return out


def shape_names(tensors: Mapping[str, Any]) -> dict[str, Any]:
    """For reading shapes: each weight-normed `X`'s direction `v` (the weight's shape) as `X.weight`."""
    renamed = weight_norm_names(tensors)
    return {(k[:-len(WN_V)] + ".weight" if k.endswith(WN_V) else k): v for k, v in renamed.items()}


def _normed(module: nn.Module) -> nn.Module:
    """Weight normalisation (Salimans & Kingma 2016, `w = g v / ||v||`, norm over all axes but the
    first) as torch's parametrization, so the names are the released files'."""
    return nn.utils.parametrizations.weight_norm(module)


def _hz_to_mel(f: torch.Tensor) -> torch.Tensor:
    """Slaney's scale: linear below 1 kHz (200/3 Hz a mel), logarithmic above (27 mels an octave x ln 6.4)."""
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    logstep = math.log(6.4) / 27.0
    return torch.where(f >= min_log_hz, min_log_hz / f_sp + torch.log(f.clamp(min=1e-10) / min_log_hz) / logstep,
                       f / f_sp)


def _mel_to_hz(m: torch.Tensor) -> torch.Tensor:
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, math.log(6.4) / 27.0
    return torch.where(m >= min_log_mel, min_log_hz * torch.exp(logstep * (m - min_log_mel)), f_sp * m)


def mel_filter_bank(n_freqs: int = N_FFT // 2 + 1, n_mels: int = N_MELS, sample_rate: int = SAMPLE_RATE,
                    f_min: float = F_MIN, f_max: float = F_MAX) -> torch.Tensor:
    """`[n_freqs, n_mels]` triangular filters with corners equally spaced on Slaney's mel scale,
    each scaled by `2 / (upper - lower corner)` (equal area), in float64."""
    freqs = torch.linspace(0, sample_rate // 2, n_freqs, dtype=torch.float64)
    corners = _mel_to_hz(torch.linspace(float(_hz_to_mel(torch.tensor(f_min, dtype=torch.float64))),
                                        float(_hz_to_mel(torch.tensor(f_max, dtype=torch.float64))), n_mels + 2,
                                        dtype=torch.float64))
    lower, centre, upper = corners[:-2], corners[1:-1], corners[2:]
    rising = (freqs[:, None] - lower[None]) / (centre - lower)[None]
    falling = (upper[None] - freqs[:, None]) / (upper - centre)[None]
    bank = torch.clamp(torch.minimum(rising, falling), min=0.0)
    return bank * (2.0 / (upper - lower))[None]


class LogMel(nn.Module):
    """Waveform `[N, S]` -> log mel `[N, 128, S / 512]` (see the module doc). The window and the
    filter bank are computed per call, not held (no weights: the module builds on meta)."""

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        pad = (N_FFT - HOP) // 2
        y = F.pad(y.float()[:, None], (pad, (N_FFT - HOP + 1) // 2), mode="reflect")[:, 0]
        spec = torch.stft(y, N_FFT, hop_length=HOP, win_length=N_FFT, window=torch.hann_window(N_FFT, device=y.device),
                          center=False, normalized=False, onesided=True, return_complex=True)
        magnitude = torch.sqrt(spec.real.pow(2) + spec.imag.pow(2) + 1e-6)  # [N, 1025, frames]
        mel = torch.einsum("nft,fm->nmt", magnitude, mel_filter_bank().to(magnitude.device, torch.float32))
        return torch.log(mel.clamp(min=1e-5))


class ChannelsFirstLayerNorm(nn.Module):
    """LayerNorm over axis 1 of `[N, C, L]` (eps 1e-6), `weight` / `bias`."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.layer_norm(x.transpose(1, 2), (x.shape[1],), self.weight.to(x), self.bias.to(x), 1e-6)
        return x.transpose(1, 2)


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int, hidden: int, kernel: int) -> None:
        super().__init__()
        self.dwconv = nn.Conv1d(dim, dim, kernel, padding=(kernel - 1) // 2, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, hidden)
        self.pwconv2 = nn.Linear(hidden, dim)
        self.gamma = nn.Parameter(torch.ones(dim), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.dwconv(x).transpose(1, 2))
        h = self.pwconv2(F.gelu(self.pwconv1(h))) * self.gamma.to(h)
        return x + h.transpose(1, 2)


class ResBlock(nn.Module):
    """HiFi-GAN's ResBlock1: three pairs of (dilated, plain) convolutions with residuals."""

    def __init__(self, channels: int, kernel: int) -> None:
        super().__init__()
        self.convs1 = nn.ModuleList(_normed(nn.Conv1d(channels, channels, kernel, dilation=d,
                                                      padding=(kernel - 1) * d // 2)) for d in RES_DILATIONS)
        self.convs2 = nn.ModuleList(_normed(nn.Conv1d(channels, channels, kernel, padding=(kernel - 1) // 2))
                                    for _ in RES_DILATIONS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for c1, c2 in zip(self.convs1, self.convs2):
            x = x + c2(F.silu(c1(F.silu(x))))
        return x


@dataclass(frozen=True)
class VocoderConfig:
    mels: int
    dims: tuple[int, ...]
    depths: tuple[int, ...]
    block_kernel: int
    mlp_hidden: tuple[int, ...]
    initial_channels: int
    pre_kernel: int
    post_kernel: int
    up_kernels: tuple[int, ...]
    up_strides: tuple[int, ...]
    res_kernels: tuple[int, ...]

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "VocoderConfig":
        """From `shape_names(tensors)` (weight-normed weights as `X.weight`). Up-sampling strides
        are `kernel / 2` (ACE-Step's
        kernels 8, 8, 4 ... over strides 4, 4, 2 ...), which shapes cannot show otherwise."""
        shape = shape_reader(tensors, prefix, VocoderConfigError, "ACE-Step vocoder")

        def count(group: str) -> int:
            return count_numbered(tensors, prefix, group, VocoderConfigError, "ACE-Step vocoder")

        stages = count("backbone.stages")
        dims = tuple(shape(f"backbone.stages.{i}.0.dwconv.weight")[0] for i in range(stages))
        depths = tuple(count(f"backbone.stages.{i}") for i in range(stages))
        mlp = tuple(shape(f"backbone.stages.{i}.0.pwconv1.weight")[0] for i in range(stages))
        _, mels, _ = shape("backbone.channel_layers.0.0.weight")
        block_kernel = shape("backbone.stages.0.0.dwconv.weight")[2]
        initial, _, pre_kernel = shape("head.conv_pre.weight")
        ups = count("head.ups")
        up_kernels = tuple(shape(f"head.ups.{i}.weight")[2] for i in range(ups))
        resblocks = count("head.resblocks")
        if ups == 0 or resblocks % ups:
            raise VocoderConfigError(f"ACE-Step vocoder: {resblocks} residual blocks over {ups} up-sampling levels")
        res_kernels = tuple(shape(f"head.resblocks.{j}.convs1.0.weight")[2] for j in range(resblocks // ups))
        return cls(mels=mels, dims=dims, depths=depths, block_kernel=block_kernel, mlp_hidden=mlp,
                   initial_channels=initial, pre_kernel=pre_kernel, post_kernel=shape("head.conv_post.weight")[2],
                   up_kernels=up_kernels, up_strides=tuple(k // 2 for k in up_kernels), res_kernels=res_kernels)

    @property
    def hop(self) -> int:
        return math.prod(self.up_strides)


class Backbone(nn.Module):
    def __init__(self, config: VocoderConfig) -> None:
        super().__init__()
        dims = config.dims
        self.channel_layers = nn.ModuleList([nn.Sequential(
            nn.Conv1d(config.mels, dims[0], 7, padding=3, padding_mode="replicate"), ChannelsFirstLayerNorm(dims[0]))])
        for i in range(len(dims) - 1):
            self.channel_layers.append(nn.Sequential(ChannelsFirstLayerNorm(dims[i]),
                                                     nn.Conv1d(dims[i], dims[i + 1], 1)))
        self.stages = nn.ModuleList(
            nn.Sequential(*(ConvNeXtBlock(dims[i], config.mlp_hidden[i], config.block_kernel)
                            for _ in range(config.depths[i]))) for i in range(len(dims)))
        self.norm = ChannelsFirstLayerNorm(dims[-1])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer, stage in zip(self.channel_layers, self.stages):
            x = stage(layer(x))
        return self.norm(x)


class Generator(nn.Module):
    def __init__(self, config: VocoderConfig) -> None:
        super().__init__()
        c0 = config.initial_channels
        self.conv_pre = _normed(nn.Conv1d(config.dims[-1], c0, config.pre_kernel,
                                          padding=(config.pre_kernel - 1) // 2))
        self.ups = nn.ModuleList(_normed(nn.ConvTranspose1d(c0 >> i, c0 >> (i + 1), k, u, padding=(k - u) // 2))
                                 for i, (k, u) in enumerate(zip(config.up_kernels, config.up_strides)))
        self.resblocks = nn.ModuleList(ResBlock(c0 >> (i + 1), k) for i in range(len(self.ups))
                                       for k in config.res_kernels)
        self.per_level = len(config.res_kernels)
        last = c0 >> len(self.ups)
        self.conv_post = _normed(nn.Conv1d(last, 1, config.post_kernel, padding=(config.post_kernel - 1) // 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv_pre(x)
        for i, up in enumerate(self.ups):
            x = up(F.silu(x))
            blocks = self.resblocks[i * self.per_level:(i + 1) * self.per_level]
            x = sum(block(x) for block in blocks) / self.per_level
        return torch.tanh(self.conv_post(F.silu(x)))


class Vocoder(nn.Module):
    """`vocoder.*`: `backbone`, `head`; `mel_transform` for encoding (see the module doc)."""

    def __init__(self, config: VocoderConfig) -> None:
        super().__init__()
        self.config = config
        self.backbone = Backbone(config)
        self.head = Generator(config)
        self.mel_transform = LogMel()

    def decode(self, mel: torch.Tensor) -> torch.Tensor:
        """Log mel `[N, 128, F]` -> waveform `[N, 1, F * hop]`."""
        return self.head(self.backbone(mel))


__all__ = ["LogMel", "Vocoder", "VocoderConfig", "VocoderConfigError", "mel_filter_bank", "shape_names",
           "weight_norm_names"]
