"""MiniMax Music 3's flow-matching DiT with its condition encoder folded in, in ComfyUI's layout
(`comfy/ldm/minimax_music/dit.py: MiniMaxMusic3DiT`, the repackaged `minimax_music3_dit_*.safetensors`);
equal to diffusers' `MiniMaxMusic3ConditionEncoder` + `MiniMaxMusic3Transformer1DModel`. Written
here from that behaviour.

Condition (the AR text encoder's per-frame states `[B, F, layers x width]`, 25 frames a second):
the `layers` (8) states of a frame mixed with `softmax(cond_layer_logits)`, scaled by
`cond_layer_scale`, projected by `latent_conditioners.0` (a 3-tap Conv1d), resampled by nearest
neighbour to the latent timeline (`latent_length(F)` = `int(F x 44100 / 24000 x 960 / 512)` frames),
multiplied by the entry's `conditioning_scale` (1 from MiniMaxMusic3TextEncode, 0 for
ConditioningZeroOut's negative: the unconditional branch sees zeros), padded with zeros or cut to
the latent's length.

Transformer (`diffusion_transformer.*`): `[latent ; zeros ; condition]` along channels (2 x 128 +
2048 = 2304), a residual 1x1 `preprocess_conv`, `project_in` to the width, a time token (random
Fourier features of the flow time `2 pi t W` -> cos / sin, `to_timestep_embed`: Linear, SiLU,
Linear) prepended, pre-norm blocks (LayerNorm `gamma` / `beta`; self-attention with fused
`to_qkv`, heads of 64, rotary embedding on the first 32 dims of each head (the file's `inv_freq`,
halves rotated, positions 0.. over [time token, frames]); LayerNorm; GLU `value x silu(gate)` MLP
with biases), `project_out` of the frames, a residual 1x1 `postprocess_conv`.

Time and sign: the network runs on `t = 1 - sigma` (ComfyUI's `model_base.MiniMaxMusic3.
process_timestep`; diffusers' flow time, 0 noise, 1 data) and returns the negated prediction,
ComfyUI's velocity for CONST (noise - data). Long latents (more than `latent_length(200)` = 689
frames, 8 s) run in windows of that length every `latent_length(100)` = 344 frames, each window's
positions from 0, the overlaps averaged.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention import calling
from comfy_core.models.comfyui_names import comfyui_name
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.weight_shapes import count_numbered, shape_reader

MARKER = "cond_layer_logits"  # ComfyUI's detection keys, with the transformer's
TRANSFORMER_MARKER = "diffusion_transformer.transformer.project_in.weight"
HEAD_DIM = 64  # ComfyUI's `dim_heads` (the weights cannot show it)
MAX_CONDITION_FRAMES = 200
CONDITION_HOP_FRAMES = 100
TEXT_FRAME_RATE = 25  # AR frames a second (24 kHz / 960)


class MiniMaxMusic3ConfigError(ValueError):
    """Weights that do not form MiniMax Music 3's DiT."""


class MiniMaxMusic3InputError(ValueError):
    """A latent or conditioning the DiT cannot take."""


def latent_length(frames: int) -> int:
    """Latent frames (44.1 kHz / 512) of `frames` AR frames (24 kHz / 960), ComfyUI's rounding."""
    return max(1, int(frames * 44100 / 24000 * 960 / 512))


@dataclass(frozen=True)
class MiniMaxMusic3Config:
    latent_channels: int = 128
    hidden: int = 2048
    depth: int = 36
    ff_inner: int = 8192
    rotary_dim: int = 32
    fourier_dim: int = 256
    condition_dim: int = 2048
    context_layers: int = 8
    context_width: int = 4096  # per layer
    head_dim: int = HEAD_DIM

    @property
    def heads(self) -> int:
        return self.hidden // self.head_dim

    @property
    def context_features(self) -> int:
        """The conditioning's width: every layer's state of a frame side by side."""
        return self.context_layers * self.context_width

    def comfy_unet_config(self) -> dict[str, Any]:
        return {"audio_model": "minimax_music3"}

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "MiniMaxMusic3Config":
        shape = shape_reader(tensors, prefix, MiniMaxMusic3ConfigError, "MiniMax Music 3")
        t = "diffusion_transformer."
        channels = shape(t + "postprocess_conv.weight")[0]
        hidden, concat = shape(t + "transformer.project_in.weight")
        condition_dim, context_width, _k = shape("latent_conditioners.0.weight")
        layers = shape(MARKER)[0]
        if concat != 2 * channels + condition_dim:
            raise MiniMaxMusic3ConfigError(f"MiniMax Music 3: project_in takes {concat} channels, not 2 x {channels} "
                                           f"latent + {condition_dim} condition")
        if hidden % HEAD_DIM:
            raise MiniMaxMusic3ConfigError(f"MiniMax Music 3: width {hidden} is not a multiple of {HEAD_DIM}-wide heads")
        depth = count_numbered(tensors, prefix, t + "transformer.layers", MiniMaxMusic3ConfigError, "MiniMax Music 3")
        ff_inner = shape(t + "transformer.layers.0.ff.ff.0.proj.weight")[0] // 2
        rotary = 2 * shape(t + "transformer.rotary_pos_emb.inv_freq")[0]
        fourier = 2 * shape(t + "timestep_features.weight")[0]
        if depth == 0:
            raise MiniMaxMusic3ConfigError("MiniMax Music 3: no transformer layers")
        return cls(latent_channels=channels, hidden=hidden, depth=depth, ff_inner=ff_inner, rotary_dim=rotary,
                   fourier_dim=fourier, condition_dim=condition_dim, context_layers=layers,
                   context_width=context_width)


def _cast(p: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return p.to(device=like.device, dtype=like.dtype)


class LayerNorm(nn.Module):
    """ComfyUI's LayerNorm with a `gamma` weight and a `beta` buffer (eps 1e-5)."""

    def __init__(self, dim: int, factory: dict[str, Any]) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(dim, **factory))
        self.register_buffer("beta", torch.zeros(dim, **factory))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), _cast(self.gamma, x), _cast(self.beta, x))


class FourierFeatures(nn.Module):
    """`t [B, 1]` -> `[cos(2 pi t W^T), sin(2 pi t W^T)]` `[B, dim]` (W: the trained `[dim / 2, 1]`)."""

    def __init__(self, dim: int, factory: dict[str, Any]) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim // 2, 1, **factory))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        angles = 2.0 * math.pi * t @ _cast(self.weight, t).T
        return torch.cat((angles.cos(), angles.sin()), dim=-1)


class RotaryEmbedding(nn.Module):
    def __init__(self, rotary_dim: int, factory: dict[str, Any]) -> None:
        super().__init__()
        self.register_buffer("inv_freq", torch.zeros(rotary_dim // 2, **factory))

    def tables(self, length: int, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin `[L, rotary_dim]` (each frequency twice: halves), in `dtype`."""
        positions = torch.arange(length, device=device, dtype=torch.float32)
        freqs = torch.outer(positions, self.inv_freq.to(device=device, dtype=torch.float32)).to(dtype)
        freqs = torch.cat((freqs, freqs), dim=-1)
        return freqs.cos(), freqs.sin()


def rotate_partial(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x `[B, H, L, D]`: its first `cos.shape[-1]` dims rotated in halves (rotate_half), the rest kept."""
    dims = cos.shape[-1]
    rot, rest = x[..., :dims], x[..., dims:]
    first, second = rot.chunk(2, dim=-1)
    rot = rot * cos + torch.cat((-second, first), dim=-1) * sin
    return torch.cat((rot, rest), dim=-1)


class Attention(nn.Module):
    def __init__(self, dim: int, head_dim: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.heads, self.head_dim = dim // head_dim, head_dim
        self.to_qkv = ops.Linear(dim, 3 * dim, bias=False, **factory)
        self.to_out = ops.Linear(dim, dim, bias=False, **factory)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, options: Mapping[str, Any]) -> torch.Tensor:
        b, n, _ = x.shape
        q, k, v = (t.reshape(b, n, self.heads, self.head_dim).transpose(1, 2) for t in self.to_qkv(x).chunk(3, dim=-1))
        q, k = rotate_partial(q, cos, sin), rotate_partial(k, cos, sin)
        out = calling.attend(q, k, v, self.heads, skip_reshape=True, transformer_options=options)  # [B, L, H*D]
        return self.to_out(out)


class GLU(nn.Module):
    def __init__(self, dim: int, inner: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.proj = ops.Linear(dim, 2 * inner, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        value, gate = self.proj(x).chunk(2, dim=-1)
        return value * F.silu(gate)


class FeedForward(nn.Module):
    def __init__(self, dim: int, inner: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.ff = nn.Sequential(GLU(dim, inner, ops, factory), nn.Identity(), ops.Linear(inner, dim, **factory))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ff(x)


class TransformerBlock(nn.Module):
    def __init__(self, config: MiniMaxMusic3Config, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.pre_norm = LayerNorm(config.hidden, factory)
        self.self_attn = Attention(config.hidden, config.head_dim, ops, factory)
        self.ff_norm = LayerNorm(config.hidden, factory)
        self.ff = FeedForward(config.hidden, config.ff_inner, ops, factory)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, options: Mapping[str, Any]) -> torch.Tensor:
        x = x + self.self_attn(self.pre_norm(x), cos, sin, options)
        return x + self.ff(self.ff_norm(x))


class ContinuousTransformer(nn.Module):
    def __init__(self, config: MiniMaxMusic3Config, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        concat = 2 * config.latent_channels + config.condition_dim
        self.project_in = ops.Linear(concat, config.hidden, bias=False, **factory)
        self.project_out = ops.Linear(config.hidden, config.latent_channels, bias=False, **factory)
        self.rotary_pos_emb = RotaryEmbedding(config.rotary_dim, factory)
        self.layers = nn.ModuleList(TransformerBlock(config, ops, factory) for _ in range(config.depth))

    def forward(self, x: torch.Tensor, time_token: torch.Tensor, options: Mapping[str, Any]) -> torch.Tensor:
        """x `[B, L, concat]`, time_token `[B, W]` -> `[B, L, C]`."""
        x = torch.cat((time_token.unsqueeze(1).to(x.dtype), self.project_in(x)), dim=1)  # [B, 1 + L, W]
        cos, sin = self.rotary_pos_emb.tables(x.shape[1], x.device, x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin, options)
        return self.project_out(x[:, 1:])


class DiffusionTransformer(nn.Module):
    def __init__(self, config: MiniMaxMusic3Config, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        concat = 2 * config.latent_channels + config.condition_dim
        self.transformer = ContinuousTransformer(config, ops, factory)
        self.timestep_features = FourierFeatures(config.fourier_dim, factory)
        self.to_timestep_embed = nn.Sequential(ops.Linear(config.fourier_dim, config.hidden, **factory), nn.SiLU(),
                                               ops.Linear(config.hidden, config.hidden, **factory))
        self.preprocess_conv = ops.Conv1d(concat, concat, 1, bias=False, **factory)
        self.postprocess_conv = ops.Conv1d(config.latent_channels, config.latent_channels, 1, bias=False, **factory)

    def forward(self, x: torch.Tensor, t: torch.Tensor, condition: torch.Tensor,
                options: Mapping[str, Any]) -> torch.Tensor:
        """x `[B, C, L]`, flow time t `[B]` (0 noise, 1 data), condition `[B, cond, L]` -> `[B, C, L]`
        (diffusers' velocity, data - noise)."""
        full = torch.cat((x, torch.zeros_like(x), condition.to(x.dtype)), dim=1)
        full = self.preprocess_conv(full) + full
        features = self.timestep_features(t[:, None].to(x.dtype))
        time_token = self.to_timestep_embed(features)
        out = self.transformer(full.transpose(1, 2), time_token, options).transpose(1, 2)
        return self.postprocess_conv(out) + out


@comfyui_name("MiniMaxMusic3DiT")
class MiniMaxMusic3Model(nn.Module):
    """ComfyUI's `MiniMaxMusic3DiT` (see the module docstring), built from a `MiniMaxMusic3Config`."""

    def __init__(self, config: MiniMaxMusic3Config, dtype: Any = None, device: Any = None,
                 operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.config = config
        self.dtype = dtype
        self.latent_conditioners = nn.Sequential(
            ops.Conv1d(config.context_width, config.condition_dim, 3, padding=1, **factory))
        self.diffusion_transformer = DiffusionTransformer(config, ops, factory)
        self.cond_layer_logits = nn.Parameter(torch.zeros(config.context_layers, **factory))
        self.cond_layer_scale = nn.Parameter(torch.ones(1, **factory))

    @classmethod
    def from_config(cls, config: MiniMaxMusic3Config, **kwargs: Any) -> "MiniMaxMusic3Model":
        return cls(config, **kwargs)

    def aligned_condition(self, context: torch.Tensor) -> torch.Tensor:
        """context `[B, F, layers x width]` -> `[B, cond, latent_length(F)]` (ComfyUI's
        `aligned_condition`, computed in the weights' dtype)."""
        config = self.config
        dtype = self.cond_layer_logits.dtype
        b, frames, features = context.shape
        if features != config.context_features:
            raise MiniMaxMusic3InputError(
                f"MiniMax Music 3 expects conditioning {config.context_layers} x {config.context_width} = "
                f"{config.context_features} wide (MiniMaxMusic3TextEncode's), got {tuple(context.shape)}")
        hidden = context.to(dtype).transpose(1, 2).reshape(b, config.context_layers, config.context_width, frames)
        weights = torch.softmax(self.cond_layer_logits, dim=0).to(hidden.dtype)
        hidden = torch.einsum("blht,l->bht", hidden, weights)
        hidden = _cast(self.cond_layer_scale, hidden) * hidden
        condition = self.latent_conditioners(hidden)
        return F.interpolate(condition, size=latent_length(frames), mode="nearest")

    def forward(self, x: torch.Tensor, timesteps: torch.Tensor, context: torch.Tensor,
                conditioning_scale: torch.Tensor | None = None, transformer_options: Mapping[str, Any] = {},
                **kwargs: Any) -> torch.Tensor:
        """x `[B, C, L]`, timesteps (sigma) `[B]`, context `[B, F, layers x width]`, conditioning_scale
        `[B, 1, 1]` (None: 1) -> the velocity `[B, C, L]` (see the module docstring)."""
        if x.ndim != 3 or x.shape[1] != self.config.latent_channels:
            raise MiniMaxMusic3InputError(f"MiniMax Music 3: the latent must be [B, {self.config.latent_channels}, T] "
                                          f"(EmptyMiniMaxMusic3LatentAudio's), got {tuple(x.shape)}")
        options = dict(transformer_options or {})
        condition = self.aligned_condition(context)
        if condition.shape[0] != x.shape[0]:
            condition = condition.expand(x.shape[0], -1, -1) if condition.shape[0] == 1 else condition
        if conditioning_scale is not None:
            condition = condition * conditioning_scale.reshape(conditioning_scale.shape[0], -1)[:, :1, None].to(condition)
        length = x.shape[-1]
        if condition.shape[-1] < length:
            condition = F.pad(condition, (0, length - condition.shape[-1]))
        else:
            condition = condition[..., :length]
        t = 1.0 - timesteps.to(torch.float32).reshape(-1)
        if t.shape[0] != x.shape[0]:
            t = t.expand(x.shape[0])
        window = latent_length(MAX_CONDITION_FRAMES)
        if length <= window:
            return -self.diffusion_transformer(x, t, condition, options)
        output = torch.zeros_like(x)
        count = torch.zeros((1, 1, length), device=x.device, dtype=x.dtype)
        hop = latent_length(CONDITION_HOP_FRAMES)
        start = 0
        while start < length:
            end = min(start + window, length)
            output[..., start:end] -= self.diffusion_transformer(x[..., start:end], t, condition[..., start:end],
                                                                 options)
            count[..., start:end] += 1
            if end == length:
                break
            start += hop
        return output / count


__all__ = ["CONDITION_HOP_FRAMES", "MARKER", "MAX_CONDITION_FRAMES", "MiniMaxMusic3Config",
           "MiniMaxMusic3ConfigError", "MiniMaxMusic3InputError", "MiniMaxMusic3Model", "TEXT_FRAME_RATE",
           "TRANSFORMER_MARKER", "latent_length"]
