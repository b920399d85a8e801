"""Stable Audio 3's diffusion transformer and `StableAudio3DiTConfig` read from weights.

Architecture of Stability AI's Stable Audio 3 ("dit1.0" with shared global AdaLN; stable-audio-tools'
format under `model.model.`, as ComfyUI's `supported_models.StableAudio3` loads it; diffusers'
`StableAudio3DiTModel` is the same network under other names and with the differential `to_qkv`
rows reordered, see `sa3_diffusers_names`); written here:

- input `x` `[B, C, T]` (256-channel latent frames of the SAME VAE, `models/sa3_vae.py`);
  `x + preprocess_conv(x)` (1x1 convolution), frames as tokens, `transformer.project_in`;
- `num_memory_tokens` learned tokens (`transformer.memory_tokens`) prepended, dropped before
  `project_out`; RoPE over all positions (memory tokens included) on the first `rotary dim`
  channels of every head (`inv_freq` from the file);
- the timestep through exponentially spaced Fourier features (frequencies 0.5 .. 10000 on a log
  scale, `[cos, sin]` of 2 pi t f; no weights) and a SiLU MLP; the global vector (`global_embed`:
  the seconds_total embedding) through `to_global_embed`, added; `transformer.global_cond_embedder`
  (SiLU MLP) turns it into 6 x width modulation shared by every block, each block adding its own
  `to_scale_shift_gate` parameter: (scale, shift, gate) for self-attention and feed-forward,
  `x * (1 + scale) + shift`, branches scaled by `sigmoid(1 - gate)`;
- the context (`context`, text tokens + the seconds token) through `to_cond_embed` (bias-free SiLU
  MLP);
- each block: RMS pre-norm (`gamma`, eps 1e-6, float32), differential self-attention
  (`to_qkv` rows `[q | k | v | q2 | k2]`, RMS q/k norms per head, `attn(q, k, v) - attn(q2, k2, v)`),
  un-modulated RMS-normed differential cross-attention (`to_q` `[q | q2]`, `to_kv` `[k | k2 | v]`, no
  RoPE), the local additive condition (`to_local_embed` SiLU MLP of `local_add_cond` `[B, 257, T]`:
  inpaint mask + masked latent) added on the audio positions, then the modulated SwiGLU
  feed-forward (`ff.ff.0.proj`, `ff.ff.2`);
- `project_out`, `out + postprocess_conv(out)`.

Differential attention: Ye et al. 2024, "Differential Transformer" (arXiv 2410.05258).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention import calling
from comfy_core.families.stable_audio.dit import RotaryEmbedding, apply_rotary
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.weight_shapes import count_numbered, shape_reader

MARKER = "transformer.global_cond_embedder.0.weight"  # SA3's shared AdaLN (Open 1.0 has none)
MIN_FREQ, MAX_FREQ = 0.5, 10000.0  # the "expo" Fourier features' range


class StableAudio3ConfigError(ValueError):
    """Weights that do not form a Stable Audio 3 DiT."""


class StableAudio3InputError(ValueError):
    """Inputs the Stable Audio 3 DiT cannot take (rank, widths)."""


@dataclass(frozen=True)
class StableAudio3DiTConfig:
    io_channels: int = 256
    embed_dim: int = 1536
    depth: int = 24
    num_heads: int = 24
    cond_token_dim: int = 768
    global_cond_dim: int = 768
    timestep_features_dim: int = 256
    ff_inner: int = 6144
    num_memory_tokens: int = 64
    local_add_cond_dim: int = 257
    differential: bool = True

    def __post_init__(self) -> None:
        for name in ("io_channels", "embed_dim", "depth", "num_heads", "cond_token_dim", "global_cond_dim",
                     "timestep_features_dim", "ff_inner"):
            if getattr(self, name) <= 0:
                raise StableAudio3ConfigError(f"Stable Audio 3 DiT: {name} must be positive, got {getattr(self, name)}")
        if self.embed_dim % self.num_heads:
            raise StableAudio3ConfigError(f"Stable Audio 3 DiT: width {self.embed_dim} is not a multiple of "
                                          f"{self.num_heads} heads")
        if self.timestep_features_dim % 2:
            raise StableAudio3ConfigError("Stable Audio 3 DiT: timestep features must be even")

    @property
    def head_dim(self) -> int:
        return self.embed_dim // self.num_heads

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "StableAudio3DiTConfig":
        shape = shape_reader(tensors, prefix, StableAudio3ConfigError, "Stable Audio 3 DiT")
        embed_dim, dim_in = shape("transformer.project_in.weight")
        io_channels = shape("preprocess_conv.weight")[0]
        if dim_in != io_channels:
            raise StableAudio3ConfigError(f"Stable Audio 3 DiT: project_in takes {dim_in} channels, the latent has "
                                          f"{io_channels} (patched inputs are not supported)")
        depth = count_numbered(tensors, prefix, "transformer.layers", StableAudio3ConfigError, "Stable Audio 3 DiT")
        if depth == 0:
            raise StableAudio3ConfigError(f"Stable Audio 3 DiT: no blocks under {prefix}transformer.layers")
        head_dim = shape("transformer.layers.0.self_attn.q_norm.gamma")[0]
        qkv = shape("transformer.layers.0.self_attn.to_qkv.weight")[0]
        if qkv not in (3 * embed_dim, 5 * embed_dim):
            raise StableAudio3ConfigError(f"Stable Audio 3 DiT: to_qkv has {qkv} rows for width {embed_dim}")
        memory = prefix + "transformer.memory_tokens"
        local = prefix + "transformer.layers.0.to_local_embed.0.weight"
        return cls(io_channels=io_channels, embed_dim=embed_dim, depth=depth, num_heads=embed_dim // head_dim,
                   cond_token_dim=shape("to_cond_embed.0.weight")[1],
                   global_cond_dim=shape("to_global_embed.0.weight")[1],
                   timestep_features_dim=shape("to_timestep_embed.0.weight")[1],
                   ff_inner=shape("transformer.layers.0.ff.ff.2.weight")[1],
                   num_memory_tokens=tuple(tensors[memory].shape)[0] if memory in tensors else 0,
                   local_add_cond_dim=tuple(tensors[local].shape)[1] if local in tensors else 0,
                   differential=qkv == 5 * embed_dim)

    def comfy_unet_config(self) -> dict[str, Any]:
        return {"audio_model": "dit1.0", "global_cond_shared_embed": True, "timestep_features_type": "expo",
                "max_text_tokens": 256}


class RMSNorm(nn.Module):
    """RMS norm with a scale `gamma`, computed in float32 (eps 1e-6)."""

    def __init__(self, dim: int, factory: dict[str, Any], eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.empty(dim, **factory))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (h * self.gamma.float()).to(x.dtype)


def expo_fourier(t: torch.Tensor, dim: int) -> torch.Tensor:
    """`[cos(2 pi t f), sin(2 pi t f)]`, `f` log-spaced from 0.5 to 10000 (`dim / 2` of them); `t` `[B]`."""
    ramp = torch.linspace(0.0, 1.0, dim // 2, device=t.device, dtype=torch.float32)
    freqs = torch.exp(math.log(MIN_FREQ) + ramp * (math.log(MAX_FREQ) - math.log(MIN_FREQ)))
    angles = t.float()[:, None] * freqs[None] * 2 * math.pi
    return torch.cat((angles.cos(), angles.sin()), dim=-1)


def _heads(t: torch.Tensor, head_dim: int) -> torch.Tensor:
    return t.reshape(t.shape[0], t.shape[1], -1, head_dim).transpose(1, 2)  # [B, H, N, d]


class DifferentialAttention(nn.Module):
    """Self-attention (`to_qkv`) or cross-attention (`to_q`, `to_kv`) with RMS q/k norms; differential
    when the projections carry the second query/key set."""

    def __init__(self, dim: int, head_dim: int, differential: bool, cross: bool, ops: Any,
                 factory: dict[str, Any]) -> None:
        super().__init__()
        self.heads, self.head_dim, self.differential, self.cross = dim // head_dim, head_dim, differential, cross
        if cross:
            self.to_q = ops.Linear(dim, dim * (2 if differential else 1), bias=False, **factory)
            self.to_kv = ops.Linear(dim, dim * (3 if differential else 2), bias=False, **factory)
        else:
            self.to_qkv = ops.Linear(dim, dim * (5 if differential else 3), bias=False, **factory)
        self.to_out = ops.Linear(dim, dim, bias=False, **factory)
        self.q_norm = RMSNorm(head_dim, factory)
        self.k_norm = RMSNorm(head_dim, factory)

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None, freqs: torch.Tensor | None = None,
                transformer_options: dict[str, Any] | None = None) -> torch.Tensor:
        if self.cross:
            queries = self.to_q(x).chunk(2 if self.differential else 1, dim=-1)
            kv = self.to_kv(context).chunk(3 if self.differential else 2, dim=-1)
            keys, v = kv[:-1], kv[-1]
        else:
            parts = self.to_qkv(x).chunk(5 if self.differential else 3, dim=-1)
            # stable-audio-tools' row order: [q | k | v | q2 | k2]
            queries, keys, v = parts[0::3][:2], parts[1::3][:2], parts[2]
        v = _heads(v, self.head_dim)
        options = transformer_options or {}
        out = None
        for q, k in zip(queries, keys):
            q, k = self.q_norm(_heads(q, self.head_dim)), self.k_norm(_heads(k, self.head_dim))
            if freqs is not None:
                q, k = apply_rotary(q, freqs), apply_rotary(k, freqs)
            o = calling.attend(q, k, v, self.heads, skip_reshape=True, transformer_options=options)
            out = o if out is None else out - o
        return self.to_out(out)


class FeedForward(nn.Module):
    """SwiGLU with biases under ComfyUI's names (`ff.0.proj`, `ff.2`)."""

    def __init__(self, dim: int, inner: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        glu = nn.Module()
        glu.proj = ops.Linear(dim, inner * 2, **factory)
        self.ff = nn.Sequential(glu, nn.Identity(), ops.Linear(inner, dim, **factory))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, gate = self.ff[0].proj(x).chunk(2, dim=-1)
        return self.ff[2](h * F.silu(gate))


class SA3Block(nn.Module):
    def __init__(self, config: StableAudio3DiTConfig, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        dim, head_dim = config.embed_dim, config.head_dim
        self.pre_norm = RMSNorm(dim, factory)
        self.self_attn = DifferentialAttention(dim, head_dim, config.differential, False, ops, factory)
        self.cross_attend_norm = RMSNorm(dim, factory)
        self.cross_attn = DifferentialAttention(dim, head_dim, config.differential, True, ops, factory)
        self.ff_norm = RMSNorm(dim, factory)
        self.ff = FeedForward(dim, config.ff_inner, ops, factory)
        self.to_scale_shift_gate = nn.Parameter(torch.empty(6 * dim, **factory))
        if config.local_add_cond_dim:
            self.to_local_embed = nn.Sequential(ops.Linear(config.local_add_cond_dim, dim, **factory), nn.SiLU(),
                                                ops.Linear(dim, dim, **factory))

    def forward(self, x: torch.Tensor, context: torch.Tensor, modulation: torch.Tensor, freqs: torch.Tensor,
                local: torch.Tensor | None, memory: int, transformer_options: dict[str, Any]) -> torch.Tensor:
        mod = (self.to_scale_shift_gate.to(modulation.dtype) + modulation)[:, None]  # [B, 1, 6 dim]
        scale_a, shift_a, gate_a, scale_f, shift_f, gate_f = mod.chunk(6, dim=-1)
        h = self.pre_norm(x) * (1 + scale_a) + shift_a
        x = x + self.self_attn(h, freqs=freqs, transformer_options=transformer_options) * torch.sigmoid(1 - gate_a)
        x = x + self.cross_attn(self.cross_attend_norm(x), context, transformer_options=transformer_options)
        if local is not None and hasattr(self, "to_local_embed"):
            added = self.to_local_embed(local)
            x = torch.cat((x[:, :memory], x[:, memory:] + added), dim=1)
        h = self.ff_norm(x) * (1 + scale_f) + shift_f
        return x + self.ff(h) * torch.sigmoid(1 - gate_f)


class SA3Transformer(nn.Module):
    def __init__(self, config: StableAudio3DiTConfig, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        dim = config.embed_dim
        self.project_in = ops.Linear(config.io_channels, dim, bias=False, **factory)
        self.project_out = ops.Linear(dim, config.io_channels, bias=False, **factory)
        if config.num_memory_tokens:
            self.memory_tokens = nn.Parameter(torch.empty(config.num_memory_tokens, dim, **factory))
        self.rotary_pos_emb = RotaryEmbedding(config.head_dim // 2, factory)
        self.global_cond_embedder = nn.Sequential(ops.Linear(dim, dim, **factory), nn.SiLU(),
                                                  ops.Linear(dim, 6 * dim, **factory))
        self.layers = nn.ModuleList([SA3Block(config, ops, factory) for _ in range(config.depth)])


class StableAudio3DiT(nn.Module):
    """See the module docstring; `forward(x [B, C, T], timestep [B], context [B, M, c],
    global_embed [B, g], local_add_cond [B, 257, T]) -> [B, C, T]`."""

    def __init__(self, config: StableAudio3DiTConfig | None = None, operations: Any = None,
                 dtype: torch.dtype | None = None, device: torch.device | str | None = None, **kwargs: Any) -> None:
        super().__init__()
        config = config or StableAudio3DiTConfig(**kwargs)
        self.config = config
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        dim = config.embed_dim
        self.to_timestep_embed = nn.Sequential(ops.Linear(config.timestep_features_dim, dim, **factory), nn.SiLU(),
                                               ops.Linear(dim, dim, **factory))
        self.to_cond_embed = nn.Sequential(ops.Linear(config.cond_token_dim, dim, bias=False, **factory), nn.SiLU(),
                                           ops.Linear(dim, dim, bias=False, **factory))
        self.to_global_embed = nn.Sequential(ops.Linear(config.global_cond_dim, dim, bias=False, **factory),
                                             nn.SiLU(), ops.Linear(dim, dim, bias=False, **factory))
        self.transformer = SA3Transformer(config, ops, factory)
        self.preprocess_conv = ops.Conv1d(config.io_channels, config.io_channels, 1, bias=False, **factory)
        self.postprocess_conv = ops.Conv1d(config.io_channels, config.io_channels, 1, bias=False, **factory)

    @classmethod
    def from_config(cls, config: StableAudio3DiTConfig, operations: Any = None) -> "StableAudio3DiT":
        return cls(config, operations=operations)

    @property
    def dtype(self) -> torch.dtype:
        return self.postprocess_conv.weight.dtype

    def lora_key_map(self, names: list[str]) -> dict[str, Any]:
        from comfy_core.families.lora_keys import native_key_map

        return native_key_map(names)

    def forward(self, x: torch.Tensor, timestep: torch.Tensor, context: torch.Tensor | None = None,
                global_embed: torch.Tensor | None = None, local_add_cond: torch.Tensor | None = None,
                transformer_options: dict[str, Any] | None = None, **kwargs: Any) -> torch.Tensor:
        config = self.config
        if x.ndim != 3 or x.shape[1] != config.io_channels:
            raise StableAudio3InputError(f"Stable Audio 3 DiT: expected a latent [B, {config.io_channels}, T], got "
                                         f"{tuple(x.shape)}")
        if context is None or context.shape[-1] != config.cond_token_dim:
            got = None if context is None else context.shape[-1]
            raise StableAudio3InputError(f"Stable Audio 3 DiT: context must be {config.cond_token_dim} wide, got {got}")
        if global_embed is None or global_embed.shape[-1] != config.global_cond_dim:
            got = None if global_embed is None else global_embed.shape[-1]
            raise StableAudio3InputError(f"Stable Audio 3 DiT: global_embed must be {config.global_cond_dim} wide, "
                                         f"got {got}")
        options = transformer_options or {}
        b = x.shape[0]
        context = self.to_cond_embed(context.to(x.dtype))
        t = timestep.reshape(-1).expand(b) if timestep.numel() == 1 else timestep.reshape(-1)
        time = self.to_timestep_embed(expo_fourier(t, config.timestep_features_dim).to(x.dtype))
        cond = self.to_global_embed(global_embed.reshape(b, -1).to(x.dtype)) + time
        modulation = self.transformer.global_cond_embedder(cond)  # [B, 6 dim]
        x = self.preprocess_conv(x) + x
        tokens = self.transformer.project_in(x.transpose(1, 2))  # [B, T, dim]
        memory = config.num_memory_tokens
        if memory:
            tokens = torch.cat((self.transformer.memory_tokens.to(tokens.dtype)[None].expand(b, -1, -1), tokens), 1)
        local = None
        if local_add_cond is not None:
            if local_add_cond.shape[1] != config.local_add_cond_dim or local_add_cond.shape[-1] != x.shape[-1]:
                raise StableAudio3InputError(f"Stable Audio 3 DiT: local_add_cond must be [B, "
                                             f"{config.local_add_cond_dim}, {x.shape[-1]}], got "
                                             f"{tuple(local_add_cond.shape)}")
            local = local_add_cond.to(x.dtype).transpose(1, 2)
        freqs = self.transformer.rotary_pos_emb(tokens.shape[1], tokens.device)
        for layer in self.transformer.layers:
            tokens = layer(tokens, context, modulation, freqs, local, memory, options)
        out = self.transformer.project_out(tokens[:, memory:]).transpose(1, 2)
        return self.postprocess_conv(out) + out


def sa3_diffusers_names(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our (stable-audio-tools / ComfyUI) DiT names from diffusers' `StableAudio3DiTModel` state dict:
    the inverse of diffusers' conversion (self-attention `to_qkv` rows `[q | q2 | k | k2 | v]` back
    to `[q | k | v | q2 | k2]`). `prompt_padding_embedding` is dropped (the model class owns it)."""
    top = {"proj_in.": "transformer.project_in.", "proj_out.": "transformer.project_out.",
           "memory_tokens": "transformer.memory_tokens", "rotary_pos_emb.": "transformer.rotary_pos_emb.",
           "global_cond_embedder.": "transformer.global_cond_embedder.", "transformer_blocks.": "transformer.layers."}
    out: dict[str, torch.Tensor] = {}
    for name, value in state.items():
        if name == "prompt_padding_embedding":
            continue
        new = name
        for old, ours in top.items():
            if name.startswith(old):
                new = ours + name[len(old):]
                break
        new = new.replace(".ff.proj_in.", ".ff.ff.0.proj.").replace(".ff.proj_out.", ".ff.ff.2.")
        if new.endswith("self_attn.to_qkv.weight") and value.shape[0] % 5 == 0:
            q, q2, k, k2, v = value.chunk(5, dim=0)
            value = torch.cat((q, k, v, q2, k2), dim=0)
        out[new] = value
    return out
