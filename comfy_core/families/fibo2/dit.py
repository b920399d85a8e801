"""Fibo 2.0's diffusion transformer and `Fibo2Config` read from weights.

Architecture of Bria's Fibo 2.0 (2026; Dev and the step + CFG distilled Edit Turbo), as diffusers'
`BriaFibo2Transformer2DModel` (diffusers 0.42, `transformer_bria_fibo2.py`) describes it; written
here from that description. Module names are diffusers' (ComfyUI's own port is not stored anywhere
we could read: that ComfyUI's files keep these names is an unverified assumption).

- Z-Image's single-stream blocks (`layers`, `noise_refiner`): RMS-normed attention with per-head
  RMS-normed q / k and RoPE, a SwiGLU `feed_forward` (`w1`, `w2`, `w3`), sandwich RMSNorms, and a
  bare-linear modulation `adaLN_modulation.0` from the 256-wide time vector into (scale, gate) for
  the attention and the MLP: `x += tanh(gate) norm2(f(norm1(x) (1 + scale)))`;
- injection blocks (those with `cross_attention`, the release's 6, 14, 22, 30, 38) also attend to
  one bundle of the text states, gated by `tanh(cross_attn_gate)`;
- the text: six bundles per token, each three Qwen3-VL layers RMS-normalised and concatenated
  (`[B, T, 6 x 3 W]` bundle-major, from CLIPLoader type "fibo2": `clip.py`); a Perceiver resampler
  (`perceiver`: learned `latent_queries`, cross-attention to bundle 0, self-attention, SwiGLU)
  squeezes bundle 0 into G gist tokens, G growing with the text length from `min_gist` to
  `max_gist` in steps (`gist_count`); bundles 1..5 feed the injection blocks in order;
- the image: Flux.2's 128-channel latents, one token per latent pixel (the 2x2 patches of the
  VAE's 32 channels in (channel, dy, dx) order, diffusers' own patching) through `x_embedder`;
  reference latents (the images an edit reads) share it as clean tokens;
- the time: sinusoid of `1000 sigma` (cos half first) -> `t_embedder` (Linear, SiLU, Linear) to
  256; noisy tokens take sigma's vector, clean ones (gist, references) sigma 0's;
- RoPE over 3 axes (`head_dim - 12 u`, `6 u`, `6 u` with `u = head_dim / 16`: 32 / 48 / 48, theta
  256, interleaved pairs): gist k at (1 + k, 0, 0), the image at (max_gist + 1, r, c), reference k
  (from 0) at (max_gist + 2 + k, r, c);
- order: the noise refiner over [image, references], then [gist, image, references] through the
  main blocks, the final layer (LayerNorm, `1 + Linear(SiLU(t))` scale, Linear) on the image tokens.

The network returns the flow velocity (noise - data) for sigma in [0, 1].
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention import calling
from comfy_core.attention.rope import apply_rope
from comfy_core.families.flux.blocks import EmbedND, timestep_embedding
from comfy_core.families.krea2.dit import rope_axes
from comfy_core.models.comfyui_names import comfyui_name
from comfy_core.models.swiglu import SwiGLUFeedForward
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.weight_shapes import count_numbered, shape_reader

ADALN_DIM = 256  # the time vector's width (diffusers' ADALN_EMBED_DIM)
ROPE_THETA = 256.0
T_SCALE = 1000.0
EPS = 1e-5
GIST_TEXT_RANGE = (256, 2048)  # text lengths mapped linearly onto [min_gist, max_gist]


class Fibo2ConfigError(ValueError):
    """The Fibo 2.0 weights are incomplete or inconsistent."""


class Fibo2InputError(ValueError):
    """Inputs the Fibo 2.0 network cannot take."""


def gist_count(text_length: int, min_gist: int, max_gist: int, step: int,
               text_range: tuple[int, int] = GIST_TEXT_RANGE) -> int:
    """Gist tokens for a text of `text_length` tokens (diffusers' `compute_gist_count`): the length's
    place in `text_range` mapped linearly onto [min_gist, max_gist], rounded up to a multiple of
    `step`, clamped."""
    low, high = text_range
    ratio = min(1.0, max(0.0, (float(text_length) - low) / (high - low)))
    raw = min_gist + ratio * (max_gist - min_gist)
    return max(min_gist, min(max_gist, int(math.ceil(raw / step)) * step))


@dataclass(frozen=True)
class Fibo2Config:
    """The network's structure (the release's: 3584 wide, 28 heads, 44 blocks with injection at
    6 / 14 / 22 / 30 / 38, 2 refiner blocks, a 2-layer Perceiver with 512 queries, text bundles of
    3 x 2560 = 7680). `min_gist` and `gist_step` are not in the weights: half and an eighth of the
    queries (the release's 256 and 64)."""

    dim: int = 3584
    heads: int = 28
    layers: int = 44
    refiner_layers: int = 2
    perceiver_layers: int = 2
    in_channels: int = 128
    cap_dim: int = 7680
    injection_layers: tuple[int, ...] = (6, 14, 22, 30, 38)
    max_gist: int = 512
    mlp_dim: int = 9536
    t_mid: int = 1024

    def __post_init__(self) -> None:
        if self.heads <= 0 or self.dim % self.heads:
            raise Fibo2ConfigError(f"Fibo 2.0: width {self.dim} with {self.heads} heads is impossible")
        if any(a <= 0 or a % 2 for a in rope_axes(self.head_dim)):
            raise Fibo2ConfigError(f"Fibo 2.0: heads of {self.head_dim} channels give RoPE axes "
                                   f"{list(rope_axes(self.head_dim))}")
        if self.max_gist < 1 or any(not 0 <= i < self.layers for i in self.injection_layers):
            raise Fibo2ConfigError(f"Fibo 2.0: {self.max_gist} gist queries, injection blocks "
                                   f"{list(self.injection_layers)} of {self.layers}")

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    @property
    def adaln_dim(self) -> int:
        return min(self.dim, ADALN_DIM)

    @property
    def min_gist(self) -> int:
        return max(1, self.max_gist // 2)

    @property
    def gist_step(self) -> int:
        return max(1, self.max_gist // 8)

    @property
    def bundles(self) -> int:
        return 1 + len(self.injection_layers)

    @property
    def context_width(self) -> int:
        return self.bundles * self.cap_dim

    def comfy_unet_config(self) -> dict[str, Any]:
        """A `unet_config` in ComfyUI's style (its own for Fibo 2.0 is not stored: unverified)."""
        return {"image_model": "fibo2", "dim": self.dim, "n_layers": self.layers, "n_heads": self.heads,
                "n_refiner_layers": self.refiner_layers, "cap_feat_dim": self.cap_dim,
                "injection_layer_ids": list(self.injection_layers), "max_num_gist_tokens": self.max_gist,
                "in_channels": self.in_channels}

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "Fibo2Config":
        """The structure from names and shapes under `prefix`: width and channels from `x_embedder`,
        heads from the q-norm width, depths by counting, injection blocks from `cross_attention`,
        text width from the Perceiver's keys, gist queries from `latent_queries`."""
        shape = shape_reader(tensors, prefix, Fibo2ConfigError, "Fibo 2.0")
        dim, in_channels = shape("x_embedder.weight")
        head = shape("layers.0.attention.norm_q.weight")[0]
        if head <= 0:
            raise Fibo2ConfigError("Fibo 2.0: empty q-norm")
        layers = count_numbered(tensors, prefix, "layers", Fibo2ConfigError, "Fibo 2.0")
        injection = tuple(i for i in range(layers) if f"{prefix}layers.{i}.cross_attention.to_k.weight" in tensors)
        return cls(dim=dim, heads=dim // head, layers=layers,
                   refiner_layers=count_numbered(tensors, prefix, "noise_refiner", Fibo2ConfigError, "Fibo 2.0"),
                   perceiver_layers=count_numbered(tensors, prefix, "perceiver.layers", Fibo2ConfigError,
                                                   "Fibo 2.0"),
                   in_channels=in_channels, cap_dim=shape("perceiver.layers.0.cross_attention.to_k.weight")[1],
                   injection_layers=injection, max_gist=shape("perceiver.latent_queries")[0],
                   mlp_dim=shape("layers.0.feed_forward.w1.weight")[0], t_mid=shape("t_embedder.mlp.0.weight")[0])


class RMSNorm(nn.Module):
    """RMSNorm with a `weight`, computed in float32, eps 1e-5 (diffusers' `RMSNorm`)."""

    def __init__(self, features: int, factory: dict[str, Any]) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(features, **factory))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight.to(device=x.device, dtype=torch.float32)
        return F.rms_norm(x.float(), (x.shape[-1],), weight=weight, eps=EPS).to(x.dtype)


class Attention(nn.Module):
    """Self-attention (RoPE when `pe` is given) or cross-attention to `context` (`kv_dim` wide),
    per-head RMS-normed q / k, no biases."""

    def __init__(self, dim: int, heads: int, ops: Any, factory: dict[str, Any], kv_dim: int | None = None) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        kv_dim = kv_dim or dim
        self.to_q = ops.Linear(dim, dim, bias=False, **factory)
        self.to_k = ops.Linear(kv_dim, dim, bias=False, **factory)
        self.to_v = ops.Linear(kv_dim, dim, bias=False, **factory)
        self.to_out = nn.ModuleList([ops.Linear(dim, dim, bias=False, **factory)])
        self.norm_q = RMSNorm(self.head_dim, factory)
        self.norm_k = RMSNorm(self.head_dim, factory)

    def forward(self, x: torch.Tensor, options: Mapping[str, Any], context: torch.Tensor | None = None,
                pe: torch.Tensor | None = None) -> torch.Tensor:
        """x `[B, L, dim]`, context `[B, S, kv_dim]` (None: x), pe `[B or 1, 1, L, D/2, 2, 2]`."""
        source = x if context is None else context
        b, n, _ = x.shape
        s = source.shape[1]
        q = self.norm_q(self.to_q(x).view(b, n, self.heads, self.head_dim)).transpose(1, 2)  # [B, H, L, D]
        k = self.norm_k(self.to_k(source).view(b, s, self.heads, self.head_dim)).transpose(1, 2)
        v = self.to_v(source).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        if pe is not None:
            q, k = apply_rope(q, k, pe)
        out = calling.attend(q, k, v, self.heads, skip_reshape=True, transformer_options=options)  # [B, L, H*D]
        return self.to_out[0](out)


def _per_token(noisy: torch.Tensor, clean: torch.Tensor, length: int, span: tuple[int, int]) -> torch.Tensor:
    """`[B, D]` values -> `[B, L, D]`: the noisy one for tokens in `span` = [start, end), else the clean."""
    start, end = span
    if start == 0 and end == length:
        return noisy.unsqueeze(1)
    inside = torch.zeros(length, dtype=torch.bool, device=noisy.device)
    inside[start:end] = True
    return torch.where(inside[None, :, None], noisy.unsqueeze(1), clean.unsqueeze(1))


class Block(nn.Module):
    """Z-Image's block; with `cross_dim`, an injection block that also reads a text bundle."""

    def __init__(self, config: Fibo2Config, ops: Any, factory: dict[str, Any], cross_dim: int | None = None) -> None:
        super().__init__()
        dim = config.dim
        self.attention = Attention(dim, config.heads, ops, factory)
        self.feed_forward = SwiGLUFeedForward(dim, config.mlp_dim, 1, None, {"operations": ops, **factory})
        self.attention_norm1 = RMSNorm(dim, factory)
        self.ffn_norm1 = RMSNorm(dim, factory)
        self.attention_norm2 = RMSNorm(dim, factory)
        self.ffn_norm2 = RMSNorm(dim, factory)
        self.adaLN_modulation = nn.Sequential(ops.Linear(config.adaln_dim, 4 * dim, bias=True, **factory))
        if cross_dim is not None:
            self.cross_attn_norm1 = RMSNorm(dim, factory)
            self.cross_attention = Attention(dim, config.heads, ops, factory, kv_dim=cross_dim)
            self.cross_attn_norm2 = RMSNorm(dim, factory)
            self.cross_attn_gate = nn.Parameter(torch.zeros(1, **factory))
        else:
            self.cross_attention = None

    def forward(self, x: torch.Tensor, pe: torch.Tensor, t_noisy: torch.Tensor, t_clean: torch.Tensor,
                span: tuple[int, int], options: Mapping[str, Any], text: torch.Tensor | None = None) -> torch.Tensor:
        """x `[B, L, dim]`; t_noisy / t_clean `[B, 256]`; tokens in `span` are the noisy ones."""
        length = x.shape[1]
        noisy = self.adaLN_modulation(t_noisy).chunk(4, dim=1)  # scale / gate (attention), scale / gate (MLP)
        clean = self.adaLN_modulation(t_clean).chunk(4, dim=1) if span != (0, length) else noisy
        scale_msa, gate_msa, scale_mlp, gate_mlp = (_per_token(n, c, length, span) for n, c in zip(noisy, clean))
        h = self.attention(self.attention_norm1(x) * (1.0 + scale_msa), options, pe=pe)
        x = x + torch.tanh(gate_msa) * self.attention_norm2(h)
        if self.cross_attention is not None:
            h = self.cross_attention(self.cross_attn_norm1(x), options, context=text)
            gate = torch.tanh(self.cross_attn_gate.to(device=x.device, dtype=x.dtype))
            x = x + gate * self.cross_attn_norm2(h)
        h = self.feed_forward(self.ffn_norm1(x) * (1.0 + scale_mlp))
        return x + torch.tanh(gate_mlp) * self.ffn_norm2(h)


class PerceiverLayer(nn.Module):
    def __init__(self, config: Fibo2Config, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        dim = config.dim
        self.cross_attn_norm = RMSNorm(dim, factory)
        self.cross_attention = Attention(dim, config.heads, ops, factory, kv_dim=config.cap_dim)
        self.self_attn_norm = RMSNorm(dim, factory)
        self.self_attention = Attention(dim, config.heads, ops, factory)
        self.ffn_norm = RMSNorm(dim, factory)
        self.ffn = SwiGLUFeedForward(dim, config.mlp_dim, 1, None, {"operations": ops, **factory})

    def forward(self, x: torch.Tensor, text: torch.Tensor, options: Mapping[str, Any]) -> torch.Tensor:
        x = x + self.cross_attention(self.cross_attn_norm(x), options, context=text)
        x = x + self.self_attention(self.self_attn_norm(x), options)
        return x + self.ffn(self.ffn_norm(x))


class Perceiver(nn.Module):
    """Text bundle 0 `[B, T, cap]` -> `count` gist tokens `[B, count, dim]`."""

    def __init__(self, config: Fibo2Config, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.latent_queries = nn.Parameter(torch.zeros(config.max_gist, config.dim, **factory))
        self.layers = nn.ModuleList(PerceiverLayer(config, ops, factory) for _ in range(config.perceiver_layers))
        self.norm_out = RMSNorm(config.dim, factory)

    def forward(self, text: torch.Tensor, count: int, options: Mapping[str, Any]) -> torch.Tensor:
        queries = self.latent_queries[:count].to(device=text.device, dtype=text.dtype)
        x = queries.unsqueeze(0).expand(text.shape[0], -1, -1)
        for layer in self.layers:
            x = layer(x, text, options)
        return self.norm_out(x)


class TimestepEmbedder(nn.Module):
    def __init__(self, config: Fibo2Config, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.mlp = nn.Sequential(ops.Linear(ADALN_DIM, config.t_mid, bias=True, **factory), nn.SiLU(),
                                 ops.Linear(config.t_mid, config.adaln_dim, bias=True, **factory))

    def forward(self, sigma: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """sigma `[B]` -> `[B, 256]` (the sinusoid of 1000 sigma, cos half first)."""
        return self.mlp(timestep_embedding(sigma.float(), ADALN_DIM, time_factor=T_SCALE).to(dtype))


class FinalLayer(nn.Module):
    def __init__(self, config: Fibo2Config, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.norm_final = nn.LayerNorm(config.dim, elementwise_affine=False, eps=1e-6)
        self.linear = ops.Linear(config.dim, config.in_channels, bias=True, **factory)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(),
                                              ops.Linear(config.adaln_dim, config.dim, bias=True, **factory))

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        scale = 1.0 + self.adaLN_modulation(t).unsqueeze(1)  # [B, 1, dim]
        return self.linear(self.norm_final(x.float()).to(x.dtype) * scale)


def _grid(plane: int, height: int, width: int, device: Any) -> torch.Tensor:
    """Positions `[h w, 3]` = (plane, r, c), row-major."""
    ids = torch.zeros(height, width, 3, device=device, dtype=torch.float32)
    ids[..., 0] = float(plane)
    ids[..., 1] = torch.arange(height, device=device, dtype=torch.float32)[:, None]
    ids[..., 2] = torch.arange(width, device=device, dtype=torch.float32)[None, :]
    return ids.reshape(height * width, 3)


@comfyui_name("Fibo2")
class Fibo2Transformer(nn.Module):
    """Fibo 2.0's transformer (see the module docstring), built from a `Fibo2Config`."""

    def __init__(self, config: Fibo2Config, dtype: Any = None, device: Any = None, operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.config = config
        self.dtype = dtype
        self.x_embedder = ops.Linear(config.in_channels, config.dim, bias=True, **factory)
        self.t_embedder = TimestepEmbedder(config, ops, factory)
        self.pe_embedder = EmbedND(config.head_dim, ROPE_THETA, rope_axes(config.head_dim))
        self.noise_refiner = nn.ModuleList(Block(config, ops, factory) for _ in range(config.refiner_layers))
        self.perceiver = Perceiver(config, ops, factory)
        injected = set(config.injection_layers)
        self.layers = nn.ModuleList(Block(config, ops, factory, config.cap_dim if i in injected else None)
                                    for i in range(config.layers))
        self.final_layer = FinalLayer(config, ops, factory)

    @classmethod
    def from_config(cls, config: Fibo2Config, **kwargs: Any) -> "Fibo2Transformer":
        return cls(config, **kwargs)

    def lora_key_map(self, names: list[str]) -> dict[str, Any]:
        """LoRA layer name -> target: ComfyUI's generic forms and diffusers' `transformer.*` (the same
        module names)."""
        from comfy_core.families.lora_keys import native_key_map

        key_map = native_key_map(names)
        for name in names:
            if name.startswith("diffusion_model.") and name.endswith(".weight"):
                key_map["transformer." + name[len("diffusion_model."):-len(".weight")]] = name
        return key_map

    def forward(self, x: torch.Tensor, timesteps: torch.Tensor, context: torch.Tensor,
                ref_latents: Sequence[torch.Tensor] | None = None, attention_mask: torch.Tensor | None = None,
                transformer_options: Mapping[str, Any] = {}, **kwargs: Any) -> torch.Tensor:
        """x `[B, C, h, w]` (Flux.2's latents), timesteps (sigma) `[B]`, context `[B, T, bundles x cap]`,
        ref_latents `[b, C, h', w']` each (clean), attention_mask `[B, T]` (True: a real text token)
        -> the velocity `[B, C, h, w]`."""
        config = self.config
        if x.ndim != 4 or x.shape[1] != config.in_channels:
            raise Fibo2InputError(f"Fibo 2.0: the latent must be [B, {config.in_channels}, h, w] (Flux.2's "
                                  f"latents), got {tuple(x.shape)}")
        if context.ndim != 3 or context.shape[-1] != config.context_width:
            raise Fibo2InputError(
                f"Fibo 2.0 expects conditioning with {config.bundles}x{config.cap_dim}={config.context_width} "
                f"features (its Qwen3-VL bundles) but got {tuple(context.shape)}; load the text encoder with "
                "CLIPLoader type 'fibo2'")
        bs = x.shape[0]
        if context.shape[0] != bs:
            context = context.expand(bs, -1, -1) if context.shape[0] == 1 else context
        if timesteps.ndim == 0 or timesteps.shape[0] != bs:
            timesteps = timesteps.reshape(-1).expand(bs)
        if attention_mask is not None:
            mask = attention_mask.reshape(attention_mask.shape[0], -1).bool()
            if not bool(mask.all()):  # padded text: each sample on its own, its padding dropped
                mask = mask.expand(bs, -1) if mask.shape[0] == 1 else mask
                outs = []
                for i in range(bs):
                    refs = None if not ref_latents else [r[i:i + 1] if r.shape[0] == bs else r for r in ref_latents]
                    outs.append(self._forward(x[i:i + 1], timesteps[i:i + 1], context[i:i + 1, mask[i].to(x.device)],
                                              refs, transformer_options))
                return torch.cat(outs)
        return self._forward(x, timesteps, context, ref_latents, transformer_options)

    def _forward(self, x: torch.Tensor, sigma: torch.Tensor, context: torch.Tensor,
                 ref_latents: Sequence[torch.Tensor] | None, transformer_options: Mapping[str, Any]) -> torch.Tensor:
        options = dict(transformer_options or {})
        config = self.config
        bs, channels, h, w = x.shape
        device = x.device
        dtype = self.x_embedder.weight.dtype if self.x_embedder.weight.is_floating_point() else x.dtype
        plane = config.max_gist + 1
        tokens = [x.flatten(2).transpose(1, 2)]  # [B, h w, C]
        ids = [_grid(plane, h, w, device)]
        for k, ref in enumerate(ref_latents or ()):
            if ref.ndim != 4 or ref.shape[1] != channels:
                raise Fibo2InputError(f"Fibo 2.0: a reference latent must be [B, {channels}, h, w], got "
                                      f"{tuple(ref.shape)}")
            if ref.shape[0] != bs:
                ref = ref.repeat((bs + ref.shape[0] - 1) // ref.shape[0], 1, 1, 1)[:bs]
            tokens.append(ref.to(device=device, dtype=x.dtype).flatten(2).transpose(1, 2))
            ids.append(_grid(plane + 1 + k, ref.shape[2], ref.shape[3], device))
        n_img = h * w
        hidden = self.x_embedder(torch.cat(tokens, dim=1).to(dtype))  # [B, N, dim]
        image_pe = self.pe_embedder(torch.cat(ids).unsqueeze(0))  # [1, 1, N, D/2, 2, 2]
        t_noisy = self.t_embedder(sigma, hidden.dtype)
        t_clean = self.t_embedder(torch.zeros_like(sigma), hidden.dtype)
        for block in self.noise_refiner:
            hidden = block(hidden, image_pe, t_noisy, t_clean, (0, n_img), options)
        length = context.shape[1]
        bundles = context.to(device=device, dtype=hidden.dtype).reshape(bs, length, config.bundles, config.cap_dim)
        count = gist_count(length, config.min_gist, config.max_gist, config.gist_step)
        gist = self.perceiver(bundles[:, :, 0], count, options)
        gist_ids = torch.zeros(count, 3, device=device)
        gist_ids[:, 0] = torch.arange(1, count + 1, device=device, dtype=torch.float32)
        pe = torch.cat([self.pe_embedder(gist_ids.unsqueeze(0)), image_pe], dim=2)
        seq = torch.cat([gist, hidden], dim=1)
        span = (count, count + n_img)
        bundle_of = {layer: index + 1 for index, layer in enumerate(config.injection_layers)}
        for index, block in enumerate(self.layers):
            text = bundles[:, :, bundle_of[index]] if index in bundle_of else None
            seq = block(seq, pe, t_noisy, t_clean, span, options, text)
        out = self.final_layer(seq[:, span[0]:span[1]], t_noisy)  # [B, h w, C]
        return out.transpose(1, 2).reshape(bs, channels, h, w).to(x.dtype)


__all__ = ["Fibo2Config", "Fibo2ConfigError", "Fibo2InputError", "Fibo2Transformer", "gist_count"]
