"""wav2vec 2.0's encoder (Baevski et al. 2020, "wav2vec 2.0: A Framework for Self-Supervised
Learning of Speech Representations"), as ComfyUI's audio encoder loader runs it for Wan's
audio-driven models (`comfy/audio_encoders/wav2vec2.py`, read, not copied).

Two variants, both in the tensor names of transformers' `Wav2Vec2Model` (so a file of either
layout loads without renaming):

- **large** (`wav2vec2_large_english_fp16`, HuMo / InfiniteTalk's English model): every feature
  convolution followed by a LayerNorm over channels, biased convolutions, "stable" pre-norm
  transformer layers with a final LayerNorm, the waveform normalised to zero mean / unit variance
  first;
- **base** (`wav2vec2-chinese-base_fp16`, S2V's model): a GroupNorm (one group per channel) on the
  first convolution only, unbiased convolutions, post-norm layers with the LayerNorm before the
  first layer, no waveform normalisation.

Input `[B, C, S]` at 16 kHz: the channels are averaged; with `normalize`, the whole batch is
standardised by its mean and its (unbiased) variance, `(x - mean) / sqrt(var + 1e-7)`, as ComfyUI
does (transformers' feature extractor does it per clip, with the population variance). Output: the
last hidden state `[B, T, D]` (T = one frame per 320 samples) and every hidden state, the input of
each layer then the final output (`num_layers + 1` entries, as transformers' `hidden_states`).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention import attention
from comfy_core.models.float32_compute import compute_in_float32

# (kernel, stride) of the seven feature convolutions: 400-sample receptive field, 320-sample hop.
CONV_LAYOUT = ((10, 5), (3, 2), (3, 2), (3, 2), (3, 2), (2, 2), (2, 2))


@dataclass(frozen=True)
class Wav2Vec2Config:
    """`stable_layer_norm`: pre-norm layers + final norm (large) vs. post-norm + norm first (base);
    `conv_layer_norm`: a LayerNorm after every convolution (large) vs. one GroupNorm after the
    first (base); `conv_bias`: bias on convolutions 2..7 (the first always has one with LayerNorm)."""

    embed_dim: int = 1024
    num_heads: int = 16
    num_layers: int = 24
    conv_dim: int = 512
    conv_layer_norm: bool = True
    conv_bias: bool = True
    normalize: bool = True
    stable_layer_norm: bool = True
    pos_kernel: int = 128
    pos_groups: int = 16
    ff_dim: int = 4096

    @classmethod
    def large(cls) -> "Wav2Vec2Config":
        return cls()

    @classmethod
    def base(cls) -> "Wav2Vec2Config":
        return cls(embed_dim=768, num_heads=12, num_layers=12, conv_layer_norm=False, conv_bias=False,
                   normalize=False, stable_layer_norm=False, ff_dim=3072)


class _FeatureConv(nn.Module):
    """Conv1d -> optional norm -> GELU. `norm`: "layer" (over channels), "group" (per channel), None."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, bias: bool, norm: str | None) -> None:
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, kernel, stride=stride, bias=bias)
        self.norm_kind = norm
        if norm == "layer":
            self.layer_norm = nn.LayerNorm(cout)
        elif norm == "group":
            self.layer_norm = nn.GroupNorm(cout, cout, affine=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, Cin, S] -> [B, Cout, S']
        x = self.conv(x)
        if self.norm_kind == "layer":
            x = self.layer_norm(x.transpose(1, 2)).transpose(1, 2)
        elif self.norm_kind == "group":
            x = self.layer_norm(x)
        return F.gelu(x)


class FeatureEncoder(nn.Module):
    def __init__(self, config: Wav2Vec2Config) -> None:
        super().__init__()
        layers = []
        for i, (kernel, stride) in enumerate(CONV_LAYOUT):
            cin = 1 if i == 0 else config.conv_dim
            if config.conv_layer_norm:
                norm, bias = "layer", (True if i == 0 else config.conv_bias)
            else:
                norm, bias = ("group" if i == 0 else None), config.conv_bias
            layers.append(_FeatureConv(cin, config.conv_dim, kernel, stride, bias, norm))
        self.conv_layers = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, S] -> [B, T, conv_dim]
        x = x[:, None]
        for layer in self.conv_layers:
            x = layer(x)
        return x.transpose(1, 2)


class FeatureProjection(nn.Module):
    def __init__(self, config: Wav2Vec2Config) -> None:
        super().__init__()
        self.layer_norm = nn.LayerNorm(config.conv_dim, eps=1e-5)
        self.projection = nn.Linear(config.conv_dim, config.embed_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.projection(self.layer_norm(x))


class PositionalConv(nn.Module):
    """A grouped convolution over time with a weight-normalised kernel (norm over all but the
    kernel axis, `dim=2`), its even kernel's extra output frame dropped, then GELU."""

    def __init__(self, config: Wav2Vec2Config) -> None:
        super().__init__()
        conv = nn.Conv1d(config.embed_dim, config.embed_dim, config.pos_kernel, padding=config.pos_kernel // 2,
                         groups=config.pos_groups)
        self.conv = nn.utils.parametrizations.weight_norm(conv, name="weight", dim=2)
        self.trim = 1 if config.pos_kernel % 2 == 0 else 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, T, D]
        y = self.conv(x.transpose(1, 2))
        if self.trim:
            y = y[:, :, :-self.trim]
        return F.gelu(y).transpose(1, 2)


class SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out_proj(attention(self.q_proj(x), self.k_proj(x), self.v_proj(x), self.heads))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.intermediate_dense = nn.Linear(dim, hidden)
        self.output_dense = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output_dense(F.gelu(self.intermediate_dense(x)))


class EncoderLayer(nn.Module):
    def __init__(self, config: Wav2Vec2Config) -> None:
        super().__init__()
        self.attention = SelfAttention(config.embed_dim, config.num_heads)
        self.layer_norm = nn.LayerNorm(config.embed_dim)
        self.feed_forward = FeedForward(config.embed_dim, config.ff_dim)
        self.final_layer_norm = nn.LayerNorm(config.embed_dim)
        self.stable = config.stable_layer_norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stable:  # pre-norm
            x = x + self.attention(self.layer_norm(x))
            return x + self.feed_forward(self.final_layer_norm(x))
        x = self.layer_norm(x + self.attention(x))  # post-norm
        return self.final_layer_norm(x + self.feed_forward(x))


class TransformerEncoder(nn.Module):
    def __init__(self, config: Wav2Vec2Config) -> None:
        super().__init__()
        self.pos_conv_embed = PositionalConv(config)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.num_layers))
        self.layer_norm = nn.LayerNorm(config.embed_dim, eps=1e-5)
        self.stable = config.stable_layer_norm

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        x = x + compute_in_float32(self.pos_conv_embed, x)
        if not self.stable:
            x = compute_in_float32(self.layer_norm, x)
        states: list[torch.Tensor] = []
        for layer in self.layers:
            states.append(x)
            x = compute_in_float32(layer, x)
        if self.stable:
            x = compute_in_float32(self.layer_norm, x)
        states.append(x)
        return x, tuple(states)


class Wav2Vec2Model(nn.Module):
    """`forward(audio [B, C, S] at 16 kHz)` -> (last hidden state [B, T, D], all hidden states),
    computed in float32 whatever the weights are stored in (ComfyUI's manual cast to the float32
    waveform), one part at a time."""

    def __init__(self, config: Wav2Vec2Config) -> None:
        super().__init__()
        self.config = config
        self.feature_extractor = FeatureEncoder(config)
        self.feature_projection = FeatureProjection(config)
        # Pre-training's mask embedding: in the files, unused when encoding.
        self.masked_spec_embed = nn.Parameter(torch.zeros(config.embed_dim))
        self.encoder = TransformerEncoder(config)

    def forward(self, audio: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        x = audio.float().mean(dim=1)                                            # [B, S]
        if self.config.normalize:
            x = (x - x.mean()) / torch.sqrt(x.var() + 1e-7)
        features = compute_in_float32(self.feature_extractor, x)                 # [B, T, conv_dim]
        features = compute_in_float32(self.feature_projection, features)         # [B, T, D]
        return self.encoder(features)
