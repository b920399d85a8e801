"""The Oobleck audio VAE (Stable Audio Open's; ACE-Step 1.5 uses the same network) and its config
read from weights.

Architecture of Stability AI's stable-audio-tools `models/autoencoders.py` (`OobleckEncoder`,
`OobleckDecoder`, the `VAEBottleneck`; Evans et al. 2024, "Stable Audio Open", arXiv 2407.14358),
as ComfyUI runs it (`comfy/ldm/audio/autoencoder.py` `AudioOobleckVAE`, the same state-dict names;
diffusers' `AutoencoderOobleck` is the same network under other names); written here:

- encoder: a weight-normalised 7-tap convolution to `channels`, one block per stride (three
  residual units of dilation 1, 3, 9 -- Snake, 7-tap dilated convolution, Snake, 1x1 convolution,
  plus the input -- then Snake and a strided convolution of kernel 2 x stride, padding
  ceil(stride / 2)), Snake and a 3-tap convolution to 2 x `latent_dim` channels (mean, scale);
- bottleneck: `mean + (softplus(scale) + 1e-4) * n`, n standard normal drawn with `randn_like` on
  the tensor's device (ComfyUI samples the latent on every encode);
- decoder: a 7-tap convolution from `latent_dim`, one block per stride in reverse (Snake, a
  weight-normalised transposed convolution of kernel 2 x stride, the three residual units), Snake
  and a bias-free 7-tap convolution to the audio channels; no tanh.

Snake is SnakeBeta with log-scale parameters: `x + sin^2(e^alpha x) / (e^beta + 1e-9)` (Ziyin et
al. 2020; BigVGAN's form). Weight normalisation (Salimans and Kingma 2016) keeps `weight_g`
`[out, 1, 1]` and `weight_v` (norm over all axes but the first); torch's parametrized names
(`parametrizations.weight.original0/1`) are read as the same tensors (`oobleck_state_dict`).

Widths, multipliers, strides and the latent width come from the weights; the marker ComfyUI tests
is `decoder.layers.1.layers.0.beta`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.models.weight_shapes import shape_reader

MARKER = "decoder.layers.1.layers.0.beta"
_PARAMETRIZED = (".parametrizations.weight.original0", ".parametrizations.weight.original1")
_PLAIN = (".weight_g", ".weight_v")


class OobleckConfigError(ValueError):
    """Weights that do not form an Oobleck VAE."""


class OobleckInputError(ValueError):
    """Audio or latents the Oobleck VAE cannot take."""


def is_oobleck_vae(names: Iterable[str]) -> bool:
    """Whether state-dict names (no prefix) hold an Oobleck VAE (ComfyUI's test in `comfy.sd.VAE`)."""
    return MARKER in set(names)


def oobleck_key(name: str) -> str:
    """torch's parametrized weight-norm name -> the stored `weight_g` / `weight_v` name."""
    for new, old in zip(_PARAMETRIZED, _PLAIN):
        if name.endswith(new):
            return name[:-len(new)] + old
    return name


def oobleck_state_dict(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A state dict in this module's names (`weight_g` / `weight_v`)."""
    return {oobleck_key(name): value for name, value in state.items()}


@dataclass(frozen=True)
class OobleckConfig:
    audio_channels: int = 2
    channels: int = 128
    latent_dim: int = 64
    c_mults: tuple[int, ...] = (1, 2, 4, 8, 16)
    strides: tuple[int, ...] = (2, 4, 4, 8, 8)

    def __post_init__(self) -> None:
        if len(self.c_mults) != len(self.strides) or not self.strides:
            raise OobleckConfigError(f"Oobleck VAE: {len(self.c_mults)} channel multipliers for "
                                     f"{len(self.strides)} strides")
        if min((self.audio_channels, self.channels, self.latent_dim) + self.c_mults + self.strides) <= 0:
            raise OobleckConfigError(f"Oobleck VAE: sizes must be positive, got {self}")

    @property
    def downscale(self) -> int:
        """Audio samples per latent frame."""
        return math.prod(self.strides)

    @property
    def embed_dim(self) -> int:
        return self.latent_dim

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "OobleckConfig":
        named = {oobleck_key(k[len(prefix):]): v for k, v in tensors.items() if k.startswith(prefix)}
        shape = shape_reader(named, "", OobleckConfigError, f"Oobleck VAE (under {prefix!r})")
        channels, audio_channels, _ = shape("encoder.layers.0.weight_v")
        blocks = 0
        while f"encoder.layers.{blocks + 1}.layers.4.weight_v" in named:
            blocks += 1
        if blocks == 0:
            raise OobleckConfigError(f"Oobleck VAE: no encoder blocks under {prefix}encoder.layers.1")
        strides, mults = [], []
        for i in range(1, blocks + 1):
            out, _in, kernel = shape(f"encoder.layers.{i}.layers.4.weight_v")
            if kernel % 2 or out % channels:
                raise OobleckConfigError(f"Oobleck VAE: encoder block {i} has kernel {kernel} and {out} channels")
            strides.append(kernel // 2)
            mults.append(out // channels)
        latent2, _, _ = shape(f"encoder.layers.{blocks + 2}.weight_v")
        latent_dim = shape("decoder.layers.0.weight_v")[1]
        if latent2 != 2 * latent_dim:
            raise OobleckConfigError(f"Oobleck VAE: the encoder gives {latent2} channels, the decoder takes "
                                     f"{latent_dim} (expected twice as many: mean and scale)")
        return cls(audio_channels=audio_channels, channels=channels, latent_dim=latent_dim, c_mults=tuple(mults),
                   strides=tuple(strides))


class WNConv1d(nn.Module):
    """A weight-normalised (transposed) 1-D convolution: weight = g v / |v| (norm over axes 1, 2)."""

    def __init__(self, in_ch: int, out_ch: int, kernel: int, stride: int = 1, padding: int = 0, dilation: int = 1,
                 bias: bool = True, transposed: bool = False, factory: dict[str, Any] | None = None) -> None:
        super().__init__()
        factory = factory or {}
        first, second = (in_ch, out_ch) if transposed else (out_ch, in_ch)
        self.weight_g = nn.Parameter(torch.empty(first, 1, 1, **factory))
        self.weight_v = nn.Parameter(torch.empty(first, second, kernel, **factory))
        self.bias = nn.Parameter(torch.empty(out_ch, **factory)) if bias else None
        self.stride, self.padding, self.dilation, self.transposed = stride, padding, dilation, transposed

    def weight(self) -> torch.Tensor:
        v = self.weight_v
        return v * (self.weight_g / v.norm(dim=(1, 2), keepdim=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight().to(x.dtype)
        bias = None if self.bias is None else self.bias.to(x.dtype)
        if self.transposed:
            return F.conv_transpose1d(x, weight, bias, self.stride, self.padding, dilation=self.dilation)
        return F.conv1d(x, weight, bias, self.stride, self.padding, self.dilation)


class SnakeBeta(nn.Module):
    def __init__(self, channels: int, factory: dict[str, Any]) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.empty(channels, **factory))
        self.beta = nn.Parameter(torch.empty(channels, **factory))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        alpha = self.alpha.to(x.dtype).exp()[None, :, None]
        beta = self.beta.to(x.dtype).exp()[None, :, None]
        return x + torch.sin(x * alpha).pow(2) / (beta + 1e-9)


class ResidualUnit(nn.Module):
    def __init__(self, channels: int, dilation: int, factory: dict[str, Any]) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            SnakeBeta(channels, factory),
            WNConv1d(channels, channels, 7, padding=3 * dilation, dilation=dilation, factory=factory),
            SnakeBeta(channels, factory),
            WNConv1d(channels, channels, 1, factory=factory))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.layers(x)


def _residuals(channels: int, factory: dict[str, Any]) -> list[nn.Module]:
    return [ResidualUnit(channels, d, factory) for d in (1, 3, 9)]


class Block(nn.Module):
    """An encoder or decoder block: its layers in order (`layers.N`)."""

    def __init__(self, *layers: nn.Module) -> None:
        super().__init__()
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class OobleckEncoder(nn.Module):
    def __init__(self, config: OobleckConfig, factory: dict[str, Any]) -> None:
        super().__init__()
        widths = [config.channels] + [config.channels * m for m in config.c_mults]
        layers: list[nn.Module] = [WNConv1d(config.audio_channels, widths[0], 7, padding=3, factory=factory)]
        for i, stride in enumerate(config.strides):
            layers.append(Block(
                *_residuals(widths[i], factory), SnakeBeta(widths[i], factory),
                WNConv1d(widths[i], widths[i + 1], 2 * stride, stride=stride, padding=math.ceil(stride / 2),
                         factory=factory)))
        layers += [SnakeBeta(widths[-1], factory), WNConv1d(widths[-1], 2 * config.latent_dim, 3, padding=1,
                                                            factory=factory)]
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class OobleckDecoder(nn.Module):
    def __init__(self, config: OobleckConfig, factory: dict[str, Any]) -> None:
        super().__init__()
        widths = [config.channels] + [config.channels * m for m in config.c_mults]
        layers: list[nn.Module] = [WNConv1d(config.latent_dim, widths[-1], 7, padding=3, factory=factory)]
        for i in range(len(config.strides), 0, -1):
            stride = config.strides[i - 1]
            layers.append(Block(
                SnakeBeta(widths[i], factory),
                WNConv1d(widths[i], widths[i - 1], 2 * stride, stride=stride, padding=math.ceil(stride / 2),
                         transposed=True, factory=factory),
                *_residuals(widths[i - 1], factory)))
        layers += [SnakeBeta(widths[0], factory),
                   WNConv1d(widths[0], config.audio_channels, 7, padding=3, bias=False, factory=factory)]
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class OobleckVAE(nn.Module):
    """`encode(audio [B, C, S]) -> latent [B, latent_dim, S / downscale]` (sampled);
    `decode(latent) -> audio [B, C, S]`."""

    def __init__(self, config: OobleckConfig | None = None, dtype: torch.dtype | None = None,
                 device: torch.device | str | None = None) -> None:
        super().__init__()
        self.config = config or OobleckConfig()
        factory = {"dtype": dtype, "device": device}
        self.encoder = OobleckEncoder(self.config, factory)
        self.decoder = OobleckDecoder(self.config, factory)

    @property
    def latent_channels(self) -> int:
        return self.config.latent_dim

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: Any, **kwargs: Any) -> None:
        for name in [k for k in state_dict if k.startswith(prefix)]:  # torch's parametrized names
            renamed = oobleck_key(name)
            if renamed != name:
                state_dict[renamed] = state_dict.pop(name)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def encode(self, audio: torch.Tensor) -> torch.Tensor:
        if audio.ndim != 3 or audio.shape[1] != self.config.audio_channels:
            raise OobleckInputError(f"Oobleck VAE: expected audio [B, {self.config.audio_channels}, S], "
                                    f"got {tuple(audio.shape)}")
        mean, scale = self.encoder(audio).chunk(2, dim=1)
        std = F.softplus(scale) + 1e-4
        return mean + std * torch.randn_like(mean)

    def decode(self, latent: torch.Tensor) -> torch.Tensor:
        if latent.ndim != 3 or latent.shape[1] != self.config.latent_dim:
            raise OobleckInputError(f"Oobleck VAE: expected a latent [B, {self.config.latent_dim}, T], "
                                    f"got {tuple(latent.shape)}")
        return self.decoder(latent)


def is_diffusers_oobleck(names: Iterable[str]) -> bool:
    """diffusers' `AutoencoderOobleck` names (`decoder.block.0.conv_t1.weight_v`)."""
    return any(name.startswith("decoder.block.") and ".conv_t1." in name for name in names)


def _diffusers_unit(rest: str) -> str:
    """A residual unit's diffusers names -> ours (snake1, conv1, snake2, conv2 -> layers.0..3)."""
    part, _, tail = rest.partition(".")
    return f"layers.{ {'snake1': 0, 'conv1': 1, 'snake2': 2, 'conv2': 3}[part] }.{tail}"


def from_diffusers_oobleck(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """diffusers' `AutoencoderOobleck` state dict -> ComfyUI's names (Snake parameters `[1, C, 1]`
    -> `[C]`); the number of blocks is read from the names."""
    blocks = {side: len({n.split(".")[2] for n in state if n.startswith(f"{side}.block.")})
              for side in ("encoder", "decoder")}
    out: dict[str, torch.Tensor] = {}
    for name, value in state.items():
        side, _, rest = name.partition(".")
        n = blocks.get(side, 0)
        head, _, tail = rest.partition(".")
        if head == "conv1":
            new = f"{side}.layers.0.{tail}"
        elif head == "snake1":
            new = f"{side}.layers.{n + 1}.{tail}"
        elif head == "conv2":
            new = f"{side}.layers.{n + 2}.{tail}"
        elif head == "block":
            index, _, inner = tail.partition(".")
            part, _, leaf = inner.partition(".")
            base = f"{side}.layers.{int(index) + 1}.layers"
            units = {"res_unit1": 0, "res_unit2": 1, "res_unit3": 2} if side == "encoder" else \
                {"res_unit1": 2, "res_unit2": 3, "res_unit3": 4}
            if part in units:
                new = f"{base}.{units[part]}.{_diffusers_unit(leaf)}"
            elif side == "encoder":
                new = f"{base}.{ {'snake1': 3, 'conv1': 4}[part] }.{leaf}"
            else:
                new = f"{base}.{ {'snake1': 0, 'conv_t1': 1}[part] }.{leaf}"
        else:
            raise OobleckConfigError(f"Oobleck VAE: unknown diffusers key {name!r}")
        if new.endswith((".alpha", ".beta")):
            value = value.reshape(-1)
        out[new] = value
    return out
