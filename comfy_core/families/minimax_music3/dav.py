"""MiniMax Music 3's DAV: the Flow-VAE waveform decoder (`minimax_music3_dav.safetensors`, VAELoader),
a DAC-style decoder (Kumar et al. 2023, "High-Fidelity Audio Compression with Improved RVQGAN").
After ComfyUI's `comfy/ldm/minimax_music/dav.py: MiniMaxMusic3DAV` (equal to diffusers'
`MiniMaxMusic3Vocoder`); written here from that behaviour.

- The latent `[B, 128, T]` is two folded streams: reshaped to `[2B, 64, T]` (left, right), each
  through `dec_in_proj` (1x1 Conv1d to 1024), `decoder.model.0` (weight-normed 7-tap Conv1d to
  1536), four blocks (Snake; weight-normed transposed Conv1d of kernel 2 x stride, stride 8, 8, 4,
  2, padding ceil(stride / 2), halving the channels; three residual units with dilations 1, 3, 9:
  Snake, 7-tap conv, Snake, 1x1 conv, added), Snake, a weight-normed 7-tap Conv1d to one channel,
  tanh; then back to `[B, 2, 512 T]` at 44.1 kHz.
- Snake: `x + sin(alpha x)^2 / (alpha + 1e-9)` per channel. Weight norm as stored: `weight_g`
  (per output channel, per input channel for the transposed convolutions: torch's dim 0) and
  `weight_v`, the weight `g v / |v|`.
- The file has no encoder: VAEEncodeAudio on it is a typed error.

`MiniMaxMusic3DavPatcher` is the VAE object (a `WaveformVaePatcher`: the audio nodes take it, tiled
decode over the latent frames); this module registers its state-dict kind
(`comfy_core.patching.vae.STATE_DICT_KINDS`) when the family is loaded.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.models.ltx_audio_vae import AudioVAEInputError
from comfy_core.models.vae import VAEConfigError
from comfy_core.patching.vae import STATE_DICT_KINDS
from comfy_core.patching.waveform_vae import WaveformVaePatcher

SAMPLE_RATE = 44100
MARKERS = ("dec_in_proj.weight", "decoder.model.0.weight_v")
DILATIONS = (1, 3, 9)


class MiniMaxMusic3DavError(VAEConfigError):
    """Weights that do not form the MiniMax Music 3 DAV."""


class MiniMaxMusic3DavInputError(MiniMaxMusic3DavError, AudioVAEInputError):
    """A latent or waveform the DAV cannot take (the audio nodes report it on their input)."""


def is_minimax_music3_dav(names: Iterable[str]) -> bool:
    """A decoder-only DAV state dict (no encoder, no H3 attention projection)."""
    names = set(names)
    return all(m in names for m in MARKERS) and not any(n.startswith(("encoder.", "pre_block.")) for n in names)


@dataclass(frozen=True)
class DavConfig:
    latent_channels: int = 128
    input_dim: int = 1024
    hidden: int = 1536
    strides: tuple[int, ...] = (8, 8, 4, 2)

    @property
    def latent_dim(self) -> int:  # WaveformVaePatcher's names
        return self.latent_channels

    @property
    def downscale(self) -> int:
        return math.prod(self.strides)

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any]) -> "DavConfig":
        def shape(name: str) -> tuple[int, ...]:
            try:
                return tuple(tensors[name].shape)
            except KeyError:
                raise MiniMaxMusic3DavError(f"MiniMax Music 3 DAV: {name!r} is missing") from None

        input_dim, folded, _ = shape("dec_in_proj.weight")
        hidden = shape("decoder.model.0.weight_v")[0]
        strides = []
        block = 1
        while f"decoder.model.{block}.block.1.weight_v" in tensors:
            strides.append(shape(f"decoder.model.{block}.block.1.weight_v")[2] // 2)
            block += 1
        if not strides:
            raise MiniMaxMusic3DavError("MiniMax Music 3 DAV: no decoder blocks")
        return cls(latent_channels=2 * folded, input_dim=input_dim, hidden=hidden, strides=tuple(strides))


class Snake1d(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(1, channels, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        alpha = self.alpha.to(x)
        return x + (alpha + 1e-9).reciprocal() * torch.sin(alpha * x).pow(2)


class WNConv(nn.Module):
    """A weight-normed convolution as stored (`weight_g`, `weight_v`, `bias`); transposed or not."""

    def __init__(self, cin: int, cout: int, kernel: int, *, transposed: bool = False, stride: int = 1,
                 padding: int = 0, dilation: int = 1) -> None:
        super().__init__()
        shape = (cin, cout, kernel) if transposed else (cout, cin, kernel)
        self.weight_g = nn.Parameter(torch.ones(shape[0], 1, 1))
        self.weight_v = nn.Parameter(torch.ones(shape))
        self.bias = nn.Parameter(torch.zeros(cout))
        self.transposed, self.stride, self.padding, self.dilation = transposed, stride, padding, dilation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = self.weight_v.to(x)
        weight = self.weight_g.to(x) * v / v.norm(dim=(1, 2), keepdim=True)
        if self.transposed:
            return F.conv_transpose1d(x, weight, self.bias.to(x), stride=self.stride, padding=self.padding)
        return F.conv1d(x, weight, self.bias.to(x), stride=self.stride, padding=self.padding, dilation=self.dilation)


class ResidualUnit(nn.Module):
    def __init__(self, dim: int, dilation: int) -> None:
        super().__init__()
        self.block = nn.Sequential(Snake1d(dim), WNConv(dim, dim, 7, padding=3 * dilation, dilation=dilation),
                                   Snake1d(dim), WNConv(dim, dim, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = self.block(x)
        trim = (x.shape[-1] - residual.shape[-1]) // 2
        if trim:
            x = x[..., trim:x.shape[-1] - trim]
        return x + residual


class DecoderBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.block = nn.Sequential(
            Snake1d(cin),
            WNConv(cin, cout, 2 * stride, transposed=True, stride=stride, padding=math.ceil(stride / 2)),
            *(ResidualUnit(cout, d) for d in DILATIONS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


class Decoder(nn.Module):
    def __init__(self, config: DavConfig) -> None:
        super().__init__()
        layers: list[nn.Module] = [WNConv(config.input_dim, config.hidden, 7, padding=3)]
        out = config.hidden
        for index, stride in enumerate(config.strides):
            cin, out = config.hidden // 2 ** index, config.hidden // 2 ** (index + 1)
            layers.append(DecoderBlock(cin, out, stride))
        layers += [Snake1d(out), WNConv(out, 1, 7, padding=3), nn.Tanh()]
        self.model = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)


class MiniMaxMusic3DAV(nn.Module):
    """See the module docstring: `decode` `[B, 128, T]` -> `[B, 2, 512 T]`."""

    sample_rate = SAMPLE_RATE

    def __init__(self, config: DavConfig, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.config = config
        self.dec_in_proj = nn.Conv1d(config.latent_channels // 2, config.input_dim, 1)
        self.decoder = Decoder(config)
        if dtype is not None:
            self.to(dtype)

    def decode(self, latent: torch.Tensor) -> torch.Tensor:
        if latent.ndim != 3 or latent.shape[1] != self.config.latent_channels:
            raise MiniMaxMusic3DavInputError(f"MiniMax Music 3 DAV: expected a latent [B, {self.config.latent_channels},"
                                             f" T], got {tuple(latent.shape)}")
        b, c, frames = latent.shape
        folded = latent.reshape(b * 2, c // 2, frames)
        return self.decoder(self.dec_in_proj(folded)).reshape(b, 2, -1)

    def encode(self, waveform: torch.Tensor) -> torch.Tensor:
        raise MiniMaxMusic3DavInputError("MiniMax Music 3 DAV: the file holds the decoder only; it cannot encode audio")


class MiniMaxMusic3DavPatcher(WaveformVaePatcher):
    """The VAE object over `MiniMaxMusic3DAV` (float32, as ComfyUI's descriptor): `decode` ->
    `[B, 512 T, 2]` at 44.1 kHz, ComfyUI's 1-D tiled decode."""

    network = MiniMaxMusic3DAV
    network_config = DavConfig
    title = "MiniMax Music 3 DAV"
    input_error = MiniMaxMusic3DavInputError
    audio_sample_rate = SAMPLE_RATE
    output_channels = 2

    def __init__(self, model: Any = None, load_device: Any = None, offload_device: Any = None, *, sd: Any = None,
                 device: Any = None, config: Any = None, dtype: torch.dtype | None = None, metadata: Any = None,
                 cache_patched_weights: bool = True) -> None:
        super().__init__(model, load_device, offload_device, sd=sd, device=device, config=config,
                         dtype=torch.float32, metadata=metadata, cache_patched_weights=cache_patched_weights)

    @property
    def vae_dtype(self) -> torch.dtype:
        return torch.float32

    def encode(self, audio: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        raise MiniMaxMusic3DavInputError("MiniMax Music 3 DAV: the file holds the decoder only; it cannot encode audio")


def register() -> None:
    """Add the DAV's state-dict kind for VAELoader (once)."""
    if (is_minimax_music3_dav, MiniMaxMusic3DavPatcher) not in STATE_DICT_KINDS:
        STATE_DICT_KINDS.append((is_minimax_music3_dav, MiniMaxMusic3DavPatcher))


register()

__all__ = ["DavConfig", "MiniMaxMusic3DAV", "MiniMaxMusic3DavError", "MiniMaxMusic3DavInputError",
           "MiniMaxMusic3DavPatcher", "SAMPLE_RATE", "is_minimax_music3_dav"]
