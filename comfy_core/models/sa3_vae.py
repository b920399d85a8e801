"""Stable Audio 3's SAME audio VAE and its config read from weights.

Architecture of Stability AI's SAME ("Semantically-Aligned Music Encoder", Stable Audio 3, arXiv
2605.17991), as ComfyUI runs it (`comfy/ldm/audio/vae_sa3.py` `SA3AudioVAE`, state-dict names of
stable-audio-tools under `pretransform.model.`; diffusers' `AutoencoderSAME` is the same network
under other names, `from_diffusers_same`); written here:

- patching: stereo audio `[B, 2, S]` right-padded to a multiple of `patch` (256) and folded to
  `[B, 2 x 256, S / 256]` (channel-major: channel c, offset h -> row c x 256 + h);
- encoder (`encoder.layers.0..L-1`): transformer resampling blocks; each maps the channels with a
  weight-normalised 1x1 convolution (`mapping`), groups `stride` frames and appends one learned
  token (`new_tokens`), runs `depth` transformer layers over the whole sequence with attention
  limited to a band of +-`window x (stride + 1)` tokens, and keeps the appended tokens; then a
  linear layer to the 256 latent channels (`encoder.layers.L+1`);
- bottleneck: `(x * scaling_factor + bias) / running_std`; decoding multiplies by `running_std`
  and, as ComfyUI's `noise_regularize`, adds `1e-3 x running_std` Gaussian noise;
- decoder: a linear layer from the latent (`decoder.layers.1`), then resampling blocks
  (`decoder.layers.3..`) that give each frame `stride` learned tokens, run the layers, keep those
  tokens and map the channels back; unpatching to `[B, 2, T x 4096]`.

A transformer layer: Dynamic Tanh norms (`gamma tanh(alpha x) + beta`, Zhu et al. 2025,
"Transformers without Normalization"), differential self-attention (`to_qkv` rows
`[q | k | v | q2 | k2]`, DyT q/k norms, RoPE on the first half of every head with the file's
`rope.inv_freq`, `attn(q, k, v) - attn(q2, k2, v)`; Ye et al. 2024, arXiv 2410.05258), a GLU
feed-forward (`ff.ff.0.proj`, `ff.ff.2`) gated by SiLU, or by `sin(pi x)` in a decoder block's
last `sinusoidal_blocks` layers.

Widths, depths, head width, patch and latent width come from the weights; the strides (a single
shared `new_tokens` row hides them), the attention window and the sinusoidal layer count cannot, and
are SA3 Medium's (16, 1, 8). ComfyUI's marker is `decoder.layers.3.transformers.0.pre_norm.alpha`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.models.oobleck_vae import WNConv1d, oobleck_key
from comfy_core.models.weight_shapes import shape_reader

MARKER = "decoder.layers.3.transformers.0.pre_norm.alpha"
AUDIO_CHANNELS = 2
SAMPLE_RATE = 44100


class SA3VAEConfigError(ValueError):
    """Weights that do not form the Stable Audio 3 VAE."""


class SA3VAEInputError(ValueError):
    """Audio or latents the Stable Audio 3 VAE cannot take."""


def is_sa3_vae(names: Iterable[str]) -> bool:
    return any(name.endswith(MARKER) for name in names)


@dataclass(frozen=True)
class SA3VAEConfig:
    patch: int = 256
    channels: tuple[int, ...] = (1536,)  # each resampling block's width, encoder order
    strides: tuple[int, ...] = (16,)
    depth: int = 12
    head_dim: int = 64
    ff_inner: int = 4608
    latent_dim: int = 256
    window: int = 1
    sinusoidal_blocks: int = 8  # the decoder's; the encoder has none
    noise_regularize: bool = True

    def __post_init__(self) -> None:
        if len(self.channels) != len(self.strides) or not self.channels:
            raise SA3VAEConfigError(f"SA3 VAE: {len(self.channels)} block widths for {len(self.strides)} strides")
        for name in ("patch", "depth", "head_dim", "ff_inner", "latent_dim", "window"):
            if getattr(self, name) <= 0:
                raise SA3VAEConfigError(f"SA3 VAE: {name} must be positive, got {getattr(self, name)}")
        if any(s <= 0 for s in self.strides):
            raise SA3VAEConfigError(f"SA3 VAE: strides must be positive, got {self.strides}")

    @property
    def downscale(self) -> int:
        """Audio samples a latent frame (4096 for SA3: 256 x 16)."""
        return self.patch * math.prod(self.strides)

    @property
    def embed_dim(self) -> int:
        """The latent channels (the loader's name for them)."""
        return self.latent_dim

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "",
                            **overrides: Any) -> "SA3VAEConfig":
        shape = shape_reader(tensors, prefix, SA3VAEConfigError, "SA3 VAE")
        levels = 0
        while prefix + f"encoder.layers.{levels}.new_tokens" in tensors:
            levels += 1
        if levels == 0:
            raise SA3VAEConfigError(f"SA3 VAE: no resampling block at {prefix}encoder.layers.0")
        channels = tuple(shape(f"encoder.layers.{i}.new_tokens")[-1] for i in range(levels))
        first_in = _mapping_in(tensors, prefix + "encoder.layers.0.mapping.", channels[0])
        if first_in % AUDIO_CHANNELS:
            raise SA3VAEConfigError(f"SA3 VAE: the first block takes {first_in} channels, not a multiple of "
                                    f"{AUDIO_CHANNELS} audio channels")
        depth = 0
        while prefix + f"encoder.layers.0.transformers.{depth}.pre_norm.alpha" in tensors:
            depth += 1
        if depth == 0:
            raise SA3VAEConfigError("SA3 VAE: the encoder's first block has no transformer layers")
        block = "encoder.layers.0.transformers.0."
        values = dict(patch=first_in // AUDIO_CHANNELS, channels=channels, strides=(16,) * levels, depth=depth,
                      head_dim=shape(block + "self_attn.q_norm.gamma")[0], ff_inner=shape(block + "ff.ff.2.weight")[1],
                      latent_dim=shape(f"encoder.layers.{levels + 1}.weight")[0])
        values.update(overrides)
        return cls(**values)


def _mapping_in(tensors: Mapping[str, Any], prefix: str, width: int) -> int:
    for name in ("weight_v", "parametrizations.weight.original1"):
        if prefix + name in tensors:
            return int(tuple(tensors[prefix + name].shape)[1])
    return width  # no mapping: the widths are equal


class DynamicTanh(nn.Module):
    def __init__(self, dim: int, factory: dict[str, Any]) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.empty(1, **factory))
        self.gamma = nn.Parameter(torch.empty(dim, **factory))
        self.beta = nn.Parameter(torch.empty(dim, **factory))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gamma.to(x.dtype) * torch.tanh(self.alpha.to(x.dtype) * x) + self.beta.to(x.dtype)


def _rotate(t: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """RoPE (rotate-half pairs) on the first `freqs.shape[-1]` channels of `t` `[B, H, N, d]`, in float32."""
    rot = freqs.shape[-1]
    head = t[..., :rot].float()
    a, b = head.chunk(2, dim=-1)
    turned = head * freqs.cos() + torch.cat((-b, a), dim=-1) * freqs.sin()
    return torch.cat((turned.to(t.dtype), t[..., rot:]), dim=-1)


class _Rope(nn.Module):
    def __init__(self, head_dim: int, factory: dict[str, Any]) -> None:
        super().__init__()
        self.register_buffer("inv_freq", torch.empty(head_dim // 4, **factory))

    def forward(self, length: int, device: torch.device) -> torch.Tensor:
        positions = torch.arange(length, device=device, dtype=torch.float32)
        freqs = positions[:, None] * self.inv_freq.to(device=device, dtype=torch.float32)[None]
        return torch.cat((freqs, freqs), dim=-1)  # [N, head_dim / 2]


class _Attention(nn.Module):
    def __init__(self, dim: int, head_dim: int, factory: dict[str, Any]) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.to_qkv = nn.Linear(dim, dim * 5, bias=False, **factory)
        self.to_out = nn.Linear(dim, dim, bias=False, **factory)
        self.q_norm = DynamicTanh(head_dim, factory)
        self.k_norm = DynamicTanh(head_dim, factory)

    def forward(self, x: torch.Tensor, freqs: torch.Tensor, band: "_Band") -> torch.Tensor:
        b, n, _ = x.shape
        q, k, v, q2, k2 = (t.reshape(b, n, -1, self.head_dim).transpose(1, 2) for t in self.to_qkv(x).chunk(5, -1))
        out = None
        for qq, kk in ((q, k), (q2, k2)):
            qq, kk = _rotate(self.q_norm(qq), freqs), _rotate(self.k_norm(kk), freqs)
            o = band.attend(qq, kk, v)
            out = o if out is None else out - o
        return self.to_out(out.transpose(1, 2).reshape(b, n, -1))


class _FeedForward(nn.Module):
    def __init__(self, dim: int, inner: int, sinusoidal: bool, factory: dict[str, Any]) -> None:
        super().__init__()
        glu = nn.Module()
        glu.proj = nn.Linear(dim, inner * 2, **factory)
        self.ff = nn.Sequential(glu, nn.Identity(), nn.Linear(inner, dim, **factory))
        self.sinusoidal = sinusoidal

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, gate = self.ff[0].proj(x).chunk(2, dim=-1)
        gate = torch.sin(math.pi * gate) if self.sinusoidal else F.silu(gate)
        return self.ff[2](h * gate)


class _Layer(nn.Module):
    def __init__(self, dim: int, config: SA3VAEConfig, sinusoidal: bool, factory: dict[str, Any]) -> None:
        super().__init__()
        head_dim = min(config.head_dim, dim)
        self.pre_norm = DynamicTanh(dim, factory)
        self.self_attn = _Attention(dim, head_dim, factory)
        self.ff_norm = DynamicTanh(dim, factory)
        self.ff = _FeedForward(dim, config.ff_inner, sinusoidal, factory)
        self.rope = _Rope(head_dim, factory)

    def forward(self, x: torch.Tensor, band: "_Band") -> torch.Tensor:
        x = x + self.self_attn(self.pre_norm(x), self.rope(x.shape[1], x.device), band)
        return x + self.ff(self.ff_norm(x))


class _Band:
    """Attention limited to |i - j| <= `window x sub` over `groups` runs of `sub` tokens, computed
    group by group against the `2 window + 1` groups around it (memory linear in the length; the
    same result as a dense `[N, N]` band mask, whose size would grow with the square of the audio
    length)."""

    def __init__(self, groups: int, sub: int, window: int, device: torch.device) -> None:
        self.groups, self.sub, self.window = groups, sub, window
        span = (2 * window + 1) * sub
        query = torch.arange(sub, device=device)[:, None] + window * sub  # position inside the key span
        key = torch.arange(span, device=device)[None]
        near = (key - query).abs() <= window * sub  # [sub, span]
        group = torch.arange(groups, device=device)[:, None, None]
        absolute = (group - window) * sub + key[None]  # [G, 1, span]
        self.mask = near[None] & (absolute >= 0) & (absolute < groups * sub)  # [G, sub, span]

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """`[B, H, N, d]` each -> `[B, H, N, d]`."""
        b, h, n, d = q.shape
        g, sub, w = self.groups, self.sub, self.window
        pad = (0, 0, w * sub, w * sub)
        span = (2 * w + 1) * sub

        def windows(t: torch.Tensor) -> torch.Tensor:  # [B, H, N, d] -> [B, H, G, span, d]
            return F.pad(t, pad).unfold(2, span, sub).movedim(-1, -2)

        out = F.scaled_dot_product_attention(q.reshape(b, h, g, sub, d), windows(k), windows(v), attn_mask=self.mask)
        return out.reshape(b, h, n, d)


class ResamplingBlock(nn.Module):
    """A transformer resampling block, encoder (`stride` frames -> 1) or decoder (1 -> `stride`)."""

    def __init__(self, in_ch: int, out_ch: int, stride: int, encoder: bool, config: SA3VAEConfig,
                 sinusoidal_blocks: int, factory: dict[str, Any]) -> None:
        super().__init__()
        self.stride, self.encoder, self.window = stride, encoder, config.window
        dim = out_ch if encoder else in_ch
        if in_ch != out_ch:
            self.mapping = WNConv1d(in_ch, out_ch, 1, factory=factory)
        self.new_tokens = nn.Parameter(torch.empty(1, 1, dim, **factory))
        self.transformers = nn.ModuleList([_Layer(dim, config, (config.depth - i) < sinusoidal_blocks, factory)
                                           for i in range(config.depth)])

    def _map(self, x: torch.Tensor) -> torch.Tensor:
        return self.mapping(x) if hasattr(self, "mapping") else x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s, b = self.stride, x.shape[0]
        if self.encoder:
            x = F.pad(x, (0, (-x.shape[-1]) % s))
            x = self._map(x).transpose(1, 2)  # [B, T, C]
            groups, keep, seg = x.shape[1] // s, 1, s
        else:
            x = x.transpose(1, 2)
            groups, keep, seg = x.shape[1], s, 1
        c = x.shape[-1]
        x = x.reshape(b * groups, seg, c)
        x = torch.cat((x, self.new_tokens.to(x.dtype).expand(b * groups, keep, c)), dim=1)
        sub = seg + keep  # stride + 1 either way
        x = x.reshape(b, groups * sub, c)
        band = _Band(groups, sub, self.window, x.device)
        for layer in self.transformers:
            x = layer(x, band)
        x = x.reshape(b * groups, sub, c)[:, -keep:].reshape(b, groups * keep, c).transpose(1, 2)
        return x if self.encoder else self._map(x)


class _Linear(nn.Module):
    """A linear layer over the channels of `[B, C, T]` (ComfyUI's Transpose / Linear / Transpose)."""

    def __init__(self, layer: nn.Linear) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x.transpose(1, 2)).transpose(1, 2)


class _Bottleneck(nn.Module):
    def __init__(self, dim: int, factory: dict[str, Any]) -> None:
        super().__init__()
        self.scaling_factor = nn.Parameter(torch.empty(1, dim, 1, **factory))
        self.bias = nn.Parameter(torch.empty(1, dim, 1, **factory))
        self.running_std = nn.Parameter(torch.empty(1, **factory), requires_grad=False)


class SA3VAE(nn.Module):
    """`encode(audio [B, 2, S]) -> latent [B, 256, ceil(S / 4096)]`; `decode(latent) -> audio
    [B, 2, T x 4096]`. State-dict names are the file's under `pretransform.model.`."""

    def __init__(self, config: SA3VAEConfig | None = None, dtype: torch.dtype | None = None,
                 device: torch.device | str | None = None) -> None:
        super().__init__()
        self.config = config = config or SA3VAEConfig()
        factory = {"dtype": dtype, "device": device}
        widths = (AUDIO_CHANNELS * config.patch,) + config.channels
        levels = len(config.strides)
        encoder = [ResamplingBlock(widths[i], widths[i + 1], config.strides[i], True, config, 0, factory)
                   for i in range(levels)]
        self.encoder = nn.Module()
        self.encoder.layers = nn.ModuleList(encoder + [nn.Identity(), nn.Linear(widths[-1], config.latent_dim,
                                                                                   **factory), nn.Identity()])
        decoder = [ResamplingBlock(widths[i + 1], widths[i], config.strides[i], False, config,
                                   config.sinusoidal_blocks, factory) for i in reversed(range(levels))]
        self.decoder = nn.Module()
        self.decoder.layers = nn.ModuleList([nn.Identity(), nn.Linear(config.latent_dim, widths[-1], **factory),
                                             nn.Identity()] + decoder)
        self.bottleneck = _Bottleneck(config.latent_dim, factory)

    @property
    def latent_channels(self) -> int:
        return self.config.latent_dim

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: Any, **kwargs: Any) -> None:
        for name in [k for k in state_dict if k.startswith(prefix)]:
            renamed = oobleck_key(name)  # torch's parametrized weight-norm names
            if renamed != name:
                state_dict[renamed] = state_dict.pop(name)
        state_dict.pop(prefix + "bottleneck.noise_scaling_factor", None)  # [1, 0, 1]: no noise channels
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def encode(self, audio: torch.Tensor) -> torch.Tensor:
        if audio.ndim != 3 or audio.shape[1] != AUDIO_CHANNELS:
            raise SA3VAEInputError(f"SA3 VAE: expected audio [B, {AUDIO_CHANNELS}, S], got {tuple(audio.shape)}")
        p = self.config.patch
        x = F.pad(audio, (0, (-audio.shape[-1]) % p))
        b, c, s = x.shape
        x = x.reshape(b, c, s // p, p).permute(0, 1, 3, 2).reshape(b, c * p, s // p)
        levels = len(self.config.strides)
        for block in self.encoder.layers[:levels]:
            x = block(x)
        x = _Linear(self.encoder.layers[levels + 1])(x)
        bn = self.bottleneck
        return (x * bn.scaling_factor.to(x.dtype) + bn.bias.to(x.dtype)) / bn.running_std.to(x.dtype)

    def decode(self, latent: torch.Tensor) -> torch.Tensor:
        if latent.ndim != 3 or latent.shape[1] != self.config.latent_dim:
            raise SA3VAEInputError(f"SA3 VAE: expected a latent [B, {self.config.latent_dim}, T], got "
                                   f"{tuple(latent.shape)}")
        std = self.bottleneck.running_std.to(latent.dtype)
        x = latent * std
        if self.config.noise_regularize:
            x = x + torch.randn_like(x) * std * 1e-3
        x = _Linear(self.decoder.layers[1])(x)
        for block in self.decoder.layers[3:]:
            x = block(x)
        b, cp, t = x.shape
        p = self.config.patch
        return x.reshape(b, cp // p, p, t).permute(0, 1, 3, 2).reshape(b, cp // p, t * p)


def from_diffusers_same(state: Mapping[str, torch.Tensor], head_dims: Mapping[int, int] | None = None,
                        ) -> dict[str, torch.Tensor]:
    """Our (stable-audio-tools) names from diffusers' `AutoencoderSAME` state dict; `to_qkv` rows
    `[q | q2 | k | k2 | v]` back to `[q | k | v | q2 | k2]`. diffusers keeps RoPE frequencies out
    of its state dict; they are written here (base 10000 over each layer's head width: `head_dims`,
    block width -> head width, default 64 capped at the width)."""
    layer_renames = (("norm_attn.", "pre_norm."), ("attn.to_qkv.", "self_attn.to_qkv."),
                     ("attn.to_out.", "self_attn.to_out."), ("attn.q_norm.", "self_attn.q_norm."),
                     ("attn.k_norm.", "self_attn.k_norm."), ("norm_ff.", "ff_norm."),
                     ("ff.proj_in.", "ff.ff.0.proj."), ("ff.proj_out.", "ff.ff.2."))
    levels = len({k.split(".")[2] for k in state if k.startswith("encoder.blocks.")})
    out: dict[str, torch.Tensor] = {}
    for name, value in state.items():
        parts = name.split(".")
        if name.startswith("encoder.blocks."):
            new = f"encoder.layers.{parts[2]}." + ".".join(parts[3:])
        elif name.startswith("decoder.blocks."):
            new = f"decoder.layers.{3 + int(parts[2])}." + ".".join(parts[3:])
        elif name.startswith("encoder.proj."):
            new = f"encoder.layers.{levels + 1}.{parts[-1]}"
        elif name.startswith("decoder.proj."):
            new = f"decoder.layers.1.{parts[-1]}"
        elif name == "bottleneck.scale":
            new = "bottleneck.scaling_factor"
        else:
            new = name
        for old, ours in layer_renames:
            if "transformers." in new and old in new:
                new = new.replace(old, ours, 1)
                break
        if new.endswith("self_attn.to_qkv.weight"):
            q, q2, k, k2, v = value.chunk(5, dim=0)
            value = torch.cat((q, k, v, q2, k2), dim=0)
        out[new] = value
    for name in [k for k in out if k.endswith(".pre_norm.gamma") and ".transformers." in k]:
        width = out[name].shape[0]
        head = (head_dims or {}).get(width, min(64, width))
        rot = head // 2
        out[name.replace("pre_norm.gamma", "rope.inv_freq")] = \
            1.0 / (10000 ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot))
    return out
