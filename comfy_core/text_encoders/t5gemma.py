"""The T5Gemma encoder tower (Zhang et al. 2025, "Encoder-Decoder Gemma: Improving the
Quality-Efficiency Trade-Off via Adaptation", arXiv 2504.06225): the encoder half of an
encoder-decoder model adapted from Gemma 2, Stable Audio 3's text encoder (`t5gemma-b-b-ul2`).

Written here after transformers' `models/t5gemma` (`T5GemmaEncoderModel`, whose parameter names
it keeps: `encoder.embed_tokens`, `encoder.layers.N.self_attn.{q,k,v,o}_proj`,
`encoder.layers.N.mlp.{gate,up,down}_proj`, the four norms `encoder.layers.N.{pre,post}_self_attn_
layernorm` / `{pre,post}_feedforward_layernorm`, `encoder.norm`):

- token embeddings times sqrt(width) (the factor rounded to the embeddings' dtype);
- per block the Gemma 2 "sandwich": h = x + N2(attn(N1(x))); out = h + N4(mlp(N3(h))), RMSNorm
  scaling by (1 + weight), computed in float32 and cast back after the scale;
- bidirectional self-attention (no causal mask; padded keys masked), rotary embedding over the
  whole head (rotate-half, theta 10000), grouped key/value heads, scores scaled by
  `query_pre_attn_scalar ** -0.5` and soft-capped `c tanh(s / c)` (c = 50); layers alternate
  sliding-window (odd positions 0, 2, ...: keys within `sliding_window` of the query, both ways)
  and full attention;
- a GeGLU feed-forward `down(gelu_tanh(gate(x)) * up(x))`; the final RMSNorm.

Widths, depth, key/value width and the vocabulary come from the weights; what they cannot show is
`T5GemmaConfig`'s: the head width (64 for t5gemma-b; heads = query rows / head width), the query
scalar (the head width unless given), the soft-cap, the window, the RoPE base, the epsilon (the
defaults are t5gemma-b-b-ul2's, as today's ComfyUI fixes them in `comfy/text_encoders/sa3.py`).
ComfyUI's `t5gemma_b_b_ul2.safetensors` holds the encoder under `model.encoder.` (transformers'
encoder-only files: `encoder.`) and its SentencePiece tokenizer as the `spiece_model` tensor;
ComfyUI runs it with no BOS / EOS, pad 0 (`t5gemma_clip.py`: the encoder-set slot and tokenizer;
CLIPLoader type "stable_audio" given a T5Gemma file builds Stable Audio 3's set).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.text_encoders.errors import TextEncoderDetectionError, TextEncoderKeyError

PREFIXES = ("encoder.", "model.encoder.")  # transformers' encoder-only and encoder-decoder files


class T5GemmaDetectionError(TextEncoderDetectionError, ValueError):
    """Weights that do not form a T5Gemma encoder."""


class T5GemmaKeyError(TextEncoderKeyError, ValueError):
    """A T5Gemma state-dict key is missing or of the wrong shape."""


@dataclass(frozen=True)
class T5GemmaConfig:
    prefix: str = "encoder."
    vocab_size: int = 256000
    hidden_size: int = 768
    intermediate_size: int = 2048
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    num_key_value_heads: int = 12
    head_dim: int = 64
    query_pre_attn_scalar: float = 64
    attn_logit_softcapping: float | None = 50.0
    sliding_window: int | None = 4096
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    slot: str = "t5gemma"

    def __post_init__(self) -> None:
        if self.num_attention_heads % self.num_key_value_heads:
            raise T5GemmaDetectionError(f"T5Gemma: {self.num_attention_heads} query heads are not a multiple of "
                                        f"{self.num_key_value_heads} key/value heads")

    @property
    def width(self) -> int:
        return self.hidden_size

    @property
    def layers(self) -> int:
        return self.num_hidden_layers

    def sliding(self, index: int) -> bool:
        """transformers' default layer types: sliding-window attention on even-numbered layers."""
        return self.sliding_window is not None and (index + 1) % 2 == 1

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str | None = None, *,
                            head_dim: int = 64, **facts: Any) -> "T5GemmaConfig | None":
        """The config of the encoder under `prefix` (default: the first of `PREFIXES` present);
        None when the weights hold none. `head_dim` and `facts` (other fields) give what the
        weights cannot show."""
        prefixes = PREFIXES if prefix is None else (prefix,)
        prefix = next((p for p in prefixes if f"{p}layers.0.pre_self_attn_layernorm.weight" in tensors), None)
        if prefix is None:
            return None

        def shape(key: str) -> tuple[int, ...]:
            try:
                return tuple(tensors[prefix + key].shape)
            except KeyError:
                raise T5GemmaKeyError(f"T5Gemma key {prefix + key!r} is missing") from None

        vocab, hidden = shape("embed_tokens.weight")
        q_rows, _ = shape("layers.0.self_attn.q_proj.weight")
        kv_rows, _ = shape("layers.0.self_attn.k_proj.weight")
        intermediate, _ = shape("layers.0.mlp.gate_proj.weight")
        if q_rows % head_dim or kv_rows % head_dim:
            raise T5GemmaDetectionError(f"T5Gemma: projections of {q_rows} / {kv_rows} rows are not whole "
                                        f"{head_dim}-wide heads")
        layers = 0
        while f"{prefix}layers.{layers}.pre_self_attn_layernorm.weight" in tensors:
            layers += 1
        config = cls(prefix=prefix, vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate,
                     num_hidden_layers=layers, num_attention_heads=q_rows // head_dim,
                     num_key_value_heads=kv_rows // head_dim, head_dim=head_dim,
                     **{"query_pre_attn_scalar": head_dim, **facts})
        for index in range(layers):
            for key, expected in config.block_shapes(index).items():
                if shape(key) != expected:
                    raise T5GemmaKeyError(f"T5Gemma key {prefix + key!r}: shape {list(shape(key))}, expected "
                                          f"{list(expected)}")
        if shape("norm.weight") != (hidden,):
            raise T5GemmaKeyError(f"T5Gemma key {prefix}norm.weight: shape {list(shape('norm.weight'))}")
        return config

    def block_shapes(self, index: int) -> dict[str, tuple[int, ...]]:
        d, q, kv, ff = (self.hidden_size, self.num_attention_heads * self.head_dim,
                        self.num_key_value_heads * self.head_dim, self.intermediate_size)
        base = f"layers.{index}."
        shapes = {f"{base}self_attn.q_proj.weight": (q, d), f"{base}self_attn.k_proj.weight": (kv, d),
                  f"{base}self_attn.v_proj.weight": (kv, d), f"{base}self_attn.o_proj.weight": (d, q),
                  f"{base}mlp.gate_proj.weight": (ff, d), f"{base}mlp.up_proj.weight": (ff, d),
                  f"{base}mlp.down_proj.weight": (d, ff)}
        for norm in ("pre_self_attn_layernorm", "post_self_attn_layernorm", "pre_feedforward_layernorm",
                     "post_feedforward_layernorm"):
            shapes[f"{base}{norm}.weight"] = (d,)
        return shapes


class RMSNorm(nn.Module):
    """Gemma's RMSNorm: x / rms(x) * (1 + weight), in float32, cast back after the scale."""

    def __init__(self, width: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (h * (1.0 + self.weight.float())).to(x.dtype)


class SelfAttention(nn.Module):
    def __init__(self, config: T5GemmaConfig) -> None:
        super().__init__()
        d, h, kv, hd = config.hidden_size, config.num_attention_heads, config.num_key_value_heads, config.head_dim
        self.heads, self.kv_heads, self.head_dim = h, kv, hd
        self.scale = float(config.query_pre_attn_scalar) ** -0.5
        self.softcap = config.attn_logit_softcapping
        self.q_proj = nn.Linear(d, h * hd, bias=False)
        self.k_proj = nn.Linear(d, kv * hd, bias=False)
        self.v_proj = nn.Linear(d, kv * hd, bias=False)
        self.o_proj = nn.Linear(h * hd, d, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)  # [B, H, N, d]
        k = self.k_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        repeat = self.heads // self.kv_heads
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        scores = torch.matmul(q, k.transpose(2, 3)) * self.scale  # [B, H, N, N]
        if self.softcap is not None:
            scores = torch.tanh(scores / self.softcap) * self.softcap
        weights = F.softmax(scores + bias, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(weights, v).transpose(1, 2).reshape(b, n, -1)
        return self.o_proj(out)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class MLP(nn.Module):
    def __init__(self, config: T5GemmaConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.gelu(self.gate_proj(x), approximate="tanh") * self.up_proj(x))


class EncoderLayer(nn.Module):
    def __init__(self, config: T5GemmaConfig) -> None:
        super().__init__()
        eps = config.rms_norm_eps
        self.self_attn = SelfAttention(config)
        self.pre_self_attn_layernorm = RMSNorm(config.hidden_size, eps)
        self.post_self_attn_layernorm = RMSNorm(config.hidden_size, eps)
        self.mlp = MLP(config)
        self.pre_feedforward_layernorm = RMSNorm(config.hidden_size, eps)
        self.post_feedforward_layernorm = RMSNorm(config.hidden_size, eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        x = x + self.post_self_attn_layernorm(self.self_attn(self.pre_self_attn_layernorm(x), cos, sin, bias))
        return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))


class T5GemmaEncoder(nn.Module):
    """The encoder (`embed_tokens`, `layers`, `norm`); `forward(ids [B, N], mask [B, N] of 0/1 or
    None) -> last hidden state [B, N, width]` (after the final norm)."""

    def __init__(self, config: T5GemmaConfig) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([EncoderLayer(config) for _ in range(config.num_hidden_layers)])
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def _rope(self, n: int, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        hd = self.config.head_dim
        inv_freq = 1.0 / (self.config.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float32, device=device) / hd))
        freqs = torch.arange(n, device=device, dtype=torch.float32)[:, None] * inv_freq[None]
        angles = torch.cat((freqs, freqs), dim=-1)  # [N, d]
        return angles.cos().to(dtype), angles.sin().to(dtype)

    def _biases(self, mask: torch.Tensor | None, b: int, n: int, device: torch.device,
                dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """Additive score biases `[B, 1, N, N]`: full attention (padded keys excluded) and the
        sliding-window one (also keys farther than the window)."""
        keys = torch.ones(b, n, dtype=torch.bool, device=device) if mask is None else mask.to(device).bool()
        allowed = keys[:, None, None, :].expand(b, 1, n, n)
        positions = torch.arange(n, device=device)
        window = self.config.sliding_window
        near = (positions[:, None] - positions[None, :]).abs() <= (window if window is not None else n)
        lowest = torch.finfo(dtype).min
        full = torch.zeros(b, 1, n, n, dtype=dtype, device=device).masked_fill(~allowed, lowest)
        sliding = full.masked_fill(~near[None, None], lowest)
        return full, sliding

    def forward(self, ids: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        x = self.embed_tokens(ids)
        x = x * torch.tensor(math.sqrt(self.config.hidden_size), dtype=x.dtype)
        b, n = ids.shape
        cos, sin = self._rope(n, x.device, x.dtype)
        full, sliding = self._biases(mask, b, n, x.device, x.dtype)
        for index, layer in enumerate(self.layers):
            x = layer(x, cos, sin, sliding if self.config.sliding(index) else full)
        return self.norm(x)


def build_t5gemma_encoder(config: T5GemmaConfig, state_dict: Mapping[str, torch.Tensor],
                          dtype: torch.dtype = torch.float32) -> T5GemmaEncoder:
    """The encoder with the weights under `config.prefix` of `state_dict` (decoder weights of an
    encoder-decoder file are left out)."""
    with torch.device("meta"):
        module = T5GemmaEncoder(config)
    state = {k[len(config.prefix):]: v.to(dtype) for k, v in state_dict.items() if k.startswith(config.prefix)}
    missing, unexpected = module.load_state_dict(state, strict=False, assign=True)
    if missing or unexpected:
        raise T5GemmaKeyError(f"T5Gemma: missing {sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]} under "
                              f"{config.prefix!r}")
    return module.eval()
