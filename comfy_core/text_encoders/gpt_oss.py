"""GPT-OSS (OpenAI 2025; the 20B) as a text encoder: the tower Lens reads (ComfyUI's
`comfy/text_encoders/gpt_oss.py`, `GptOssModel`), written here from that behaviour and from
transformers' `models/gpt_oss`, whose numerics it reproduces (tests/comfy_core/test_gpt_oss.py).

- Decoder blocks (24 for the 20B, 2880 wide): pre-RMSNorm (eps 1e-5, plain `weight * x`) attention
  and mixture of experts, residual after each.
- Attention: biased q / k / v / o projections, 64 query heads and 8 key-value heads of 64 (grouped),
  rotate-half RoPE with YaRN (base 150000, factor 32, beta fast 32 / slow 1, 4096 original
  positions, no truncation; cos / sin scaled by `0.1 ln(factor) + 1`), scale `1 / sqrt(64)`, and
  learned per-head *sinks*: each row's softmax denominator gains `exp(sink)`, which adds nothing to
  the output. Even blocks (0, 2, ...) attend within a sliding window of 128 keys (`j > i - 128`),
  odd blocks to every earlier key; both causal, padded keys excluded.
- Mixture of experts: a biased router (32 experts) keeps the top 4 logits per token and softmaxes
  them; each chosen expert computes `gate_up = W_gu x + b_gu` (gate and up interleaved: even / odd
  channels), `gate = min(gate, 7)`, `up = clamp(up, -7, 7)`, `(up + 1) gate sigmoid(1.702 gate)`,
  then `W_d . + b_d`, weighted by its score and summed.
- `captured(ids, mask, taps)`: the outputs of the tapped blocks (no final norm), running no block
  after the last tap (ComfyUI's early exit).

Weights (ComfyUI's names under the tower's prefix): `embed_tokens.weight`, `layers.N.
{input_layernorm, post_attention_layernorm}.weight`, `layers.N.self_attn.{q,k,v,o}_proj.{weight,bias}`,
`layers.N.self_attn.sinks`, `layers.N.mlp.router.{weight,bias}`, `layers.N.mlp.experts.
{gate_up_proj,down_proj}.{weight,bias}` (`[experts, out, in]`, ComfyUI's `MoEExperts`), `norm.weight`.
transformers' expert layout (`gate_up_proj` `[experts, in, out]` with `gate_up_proj_bias`) is
converted (`from_transformers_experts`). Weights are kept in their stored dtype (ComfyUI's
`dtype_llama`); every product is computed in float32.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.text_encoders.errors import TextEncoderError

SINKS = "layers.0.self_attn.sinks"  # ComfyUI's detection key (`clip_target`)


class GptOssConfigError(TextEncoderError, ValueError):
    """GPT-OSS weights that are incomplete or inconsistent."""


@dataclass(frozen=True)
class GptOssConfig:
    """The tower's structure (ComfyUI's `GptOss20BConfig` defaults), widths and counts read from
    the weights (`detect_from_weights`); the RoPE and MoE constants are the 20B's."""

    vocab_size: int = 201088
    hidden_size: int = 2880
    intermediate_size: int = 2880
    num_layers: int = 24
    num_heads: int = 64
    num_kv_heads: int = 8
    head_dim: int = 64
    num_experts: int = 32
    experts_per_token: int = 4
    sliding_window: int = 128
    original_max_positions: int = 4096
    rope_theta: float = 150000.0
    rope_factor: float = 32.0
    rope_beta_fast: float = 32.0
    rope_beta_slow: float = 1.0
    rms_norm_eps: float = 1e-5
    moe_alpha: float = 1.702
    moe_limit: float = 7.0

    @property
    def width(self) -> int:
        return self.hidden_size

    @property
    def layers(self) -> int:
        return self.num_layers

    def layer_type(self, index: int) -> str:
        """ComfyUI's / transformers' default: even blocks slide, odd blocks see everything."""
        return "sliding_attention" if (index + 1) % 2 else "full_attention"

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "GptOssConfig | None":
        """The config of the tower under `prefix` (ComfyUI's names), None when there is none."""
        if prefix + SINKS not in tensors:
            return None

        def shape(name: str) -> tuple[int, ...]:
            if prefix + name not in tensors:
                raise GptOssConfigError(f"GPT-OSS weights under {prefix!r} lack {name}")
            return tuple(int(d) for d in tensors[prefix + name].shape)

        vocab, hidden = shape("embed_tokens.weight")
        heads = shape(SINKS)[0]
        q_out = shape("layers.0.self_attn.q_proj.weight")[0]
        k_out = shape("layers.0.self_attn.k_proj.weight")[0]
        if q_out % heads:
            raise GptOssConfigError(f"GPT-OSS: q_proj gives {q_out} channels for {heads} heads")
        head_dim = q_out // heads
        experts = shape("layers.0.mlp.router.weight")[0]
        gate_up = shape(_expert_name("gate_up_proj", tensors, prefix))
        inter = (gate_up[1] if gate_up[2] == hidden else gate_up[2]) // 2
        layers = 0
        while f"{prefix}layers.{layers}.self_attn.sinks" in tensors:
            layers += 1
        return cls(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_layers=layers,
                   num_heads=heads, num_kv_heads=k_out // head_dim, head_dim=head_dim, num_experts=experts,
                   experts_per_token=min(cls.experts_per_token, experts))


def _expert_name(kind: str, tensors: Mapping[str, Any], prefix: str, layer: int = 0) -> str:
    base = f"layers.{layer}.mlp.experts.{kind}"
    return base + ".weight" if prefix + base + ".weight" in tensors else base


def from_transformers_experts(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """transformers' expert names and `[experts, in, out]` weights -> ComfyUI's `[experts, out, in]`
    `.weight` / `.bias`; other names unchanged."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        for kind in ("gate_up_proj", "down_proj"):
            if name.endswith(f"mlp.experts.{kind}"):
                name, tensor = name + ".weight", tensor.transpose(1, 2).contiguous()
            elif name.endswith(f"mlp.experts.{kind}_bias"):
                name = name[:-len("_bias")] + ".bias"
        out[name] = tensor
    return out


def yarn_tables(config: GptOssConfig, length: int, device: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin `[T, head_dim]` float32 of YaRN's RoPE at positions 0..T-1, scaled by its attention
    factor (Peng et al. 2023, "YaRN"; transformers' `_compute_yarn_parameters`, truncate off)."""
    dim, base = config.head_dim, config.rope_theta

    def correction_dim(rotations: float) -> float:
        return dim * math.log(config.original_max_positions / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low = max(correction_dim(config.rope_beta_fast), 0)
    high = min(correction_dim(config.rope_beta_slow), dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float32, device=device) - low) / (high - low)).clamp(0, 1)
    extrapolate = 1 - ramp
    powers = base ** (torch.arange(0, dim, 2, dtype=torch.float32, device=device) / dim)
    inv_freq = (1.0 / (config.rope_factor * powers)) * (1 - extrapolate) + (1.0 / powers) * extrapolate
    scaling = 0.1 * math.log(config.rope_factor) + 1.0 if config.rope_factor > 1 else 1.0
    freqs = torch.arange(length, dtype=torch.float32, device=device)[:, None] * inv_freq[None, :]
    angles = torch.cat((freqs, freqs), dim=-1)
    return angles.cos() * scaling, angles.sin() * scaling


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x `[B, H, T, d]` rotated (rotate-half)."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return F.linear(x, weight.to(x.device, torch.float32), None if bias is None else bias.to(x.device, torch.float32))


def key_masks(config: GptOssConfig, mask: torch.Tensor, device: Any) -> dict[str, torch.Tensor]:
    """Token mask `[B, T]` (1 keeps) -> boolean "may attend" `[B, 1, T, T]` per layer type."""
    length = mask.shape[1]
    i = torch.arange(length, device=device)[:, None]
    j = torch.arange(length, device=device)[None, :]
    keys = mask.to(device).bool()[:, None, None, :]
    causal = (j <= i)[None, None]
    return {"full_attention": causal & keys,
            "sliding_attention": (causal & (j > i - config.sliding_window)[None, None]) & keys}


class GptOssAttention(nn.Module):
    def __init__(self, config: GptOssConfig) -> None:
        super().__init__()
        w, q, kv = config.hidden_size, config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim
        self.q_proj, self.k_proj = nn.Linear(w, q, device="meta"), nn.Linear(w, kv, device="meta")
        self.v_proj, self.o_proj = nn.Linear(w, kv, device="meta"), nn.Linear(q, w, device="meta")
        self.sinks = nn.Parameter(torch.empty(config.num_heads, device="meta"))
        self.config = config

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        """x `[B, T, W]` float32 -> `[B, T, W]`; `allowed` `[B, 1, T, T]` boolean."""
        c = self.config
        b, t, _ = x.shape
        q = _linear(x, self.q_proj.weight, self.q_proj.bias).view(b, t, c.num_heads, c.head_dim).transpose(1, 2)
        k = _linear(x, self.k_proj.weight, self.k_proj.bias).view(b, t, c.num_kv_heads, c.head_dim).transpose(1, 2)
        v = _linear(x, self.v_proj.weight, self.v_proj.bias).view(b, t, c.num_kv_heads, c.head_dim).transpose(1, 2)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        groups = c.num_heads // c.num_kv_heads
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)  # [B, H, T, d]
        logits = (q @ k.transpose(-1, -2)) / math.sqrt(c.head_dim)  # [B, H, T, T]
        logits = logits.masked_fill(~allowed, torch.finfo(torch.float32).min)
        sinks = self.sinks.to(x.device, torch.float32).view(1, -1, 1, 1).expand(b, -1, t, 1)
        full = torch.cat([logits, sinks], dim=-1)
        probs = torch.softmax(full - full.amax(dim=-1, keepdim=True), dim=-1)[..., :t]  # the sink column dropped
        out = (probs @ v).transpose(1, 2).reshape(b, t, -1)
        return _linear(out, self.o_proj.weight, self.o_proj.bias)


class GptOssRouter(nn.Module):
    def __init__(self, config: GptOssConfig) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(config.num_experts, config.hidden_size, device="meta"))
        self.bias = nn.Parameter(torch.empty(config.num_experts, device="meta"))


class GptOssExperts(nn.Module):
    """The experts' stacked weights; each a module with `weight` `[E, out, in]` and `bias` `[E, out]`."""

    def __init__(self, config: GptOssConfig) -> None:
        super().__init__()
        e, w, i = config.num_experts, config.hidden_size, config.intermediate_size
        self.gate_up_proj = nn.Module()
        self.gate_up_proj.weight = nn.Parameter(torch.empty(e, 2 * i, w, device="meta"))
        self.gate_up_proj.bias = nn.Parameter(torch.empty(e, 2 * i, device="meta"))
        self.down_proj = nn.Module()
        self.down_proj.weight = nn.Parameter(torch.empty(e, w, i, device="meta"))
        self.down_proj.bias = nn.Parameter(torch.empty(e, w, device="meta"))


class GptOssMLP(nn.Module):
    def __init__(self, config: GptOssConfig) -> None:
        super().__init__()
        self.router = GptOssRouter(config)
        self.experts = GptOssExperts(config)
        self.config = config

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x `[B, T, W]` float32 -> `[B, T, W]`."""
        c = self.config
        flat = x.reshape(-1, x.shape[-1])  # [N, W]
        logits = _linear(flat, self.router.weight, self.router.bias)  # [N, E]
        top, chosen = torch.topk(logits, c.experts_per_token, dim=-1)  # [N, K]
        scores = torch.softmax(top, dim=-1)
        out = torch.zeros_like(flat)
        gu, down = self.experts.gate_up_proj, self.experts.down_proj
        for expert in torch.unique(chosen).tolist():
            rows, slot = torch.where(chosen == expert)
            h = _linear(flat[rows], gu.weight[expert], gu.bias[expert])  # [n, 2I]
            gate, up = h[..., 0::2].clamp(max=c.moe_limit), h[..., 1::2].clamp(-c.moe_limit, c.moe_limit)
            h = (up + 1) * (gate * torch.sigmoid(gate * c.moe_alpha))
            h = _linear(h, down.weight[expert], down.bias[expert])  # [n, W]
            out.index_add_(0, rows, h * scores[rows, slot, None])
        return out.reshape(x.shape)


class RMSNorm(nn.Module):
    def __init__(self, width: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(width, device="meta"))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight.to(x.device, torch.float32), self.eps)


class GptOssLayer(nn.Module):
    def __init__(self, config: GptOssConfig, index: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = GptOssAttention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = GptOssMLP(config)
        self.layer_type = config.layer_type(index)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                masks: Mapping[str, torch.Tensor]) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, masks[self.layer_type])
        return x + self.mlp(self.post_attention_layernorm(x))


class GptOssModel(nn.Module):
    """The decoder (ComfyUI's `GptOssModel`: `embed_tokens`, `layers`, `norm`)."""

    def __init__(self, config: GptOssConfig) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, device="meta")
        self.layers = nn.ModuleList(GptOssLayer(config, i) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    @property
    def num_layers(self) -> int:
        return self.config.num_layers

    def captured(self, ids: torch.Tensor, mask: torch.Tensor | None, taps: Sequence[int]) -> list[torch.Tensor]:
        """ids `[B, T]`, mask `[B, T]` (1 keeps) -> the outputs of blocks `taps`, each `[B, T, W]`
        float32 (no final norm); the blocks after the last tap are not run."""
        c = self.config
        if max(taps) >= c.num_layers:
            raise GptOssConfigError(f"GPT-OSS: layer {max(taps)} is beyond this {c.num_layers}-block tower")
        device = self.embed_tokens.weight.device
        ids = ids.to(device)
        if int(ids.max()) >= c.vocab_size if ids.numel() else False:
            raise GptOssConfigError(f"GPT-OSS: token id {int(ids.max())} is beyond the {c.vocab_size}-token table")
        mask = torch.ones_like(ids) if mask is None else mask.to(device)
        x = self.embed_tokens.weight[ids].float()  # [B, T, W]
        cos, sin = yarn_tables(c, ids.shape[1], device)
        masks = key_masks(c, mask, device)
        wanted, out = {index: n for n, index in enumerate(taps)}, [None] * len(taps)
        for index, layer in enumerate(self.layers):
            x = layer(x, cos, sin, masks)
            if index in wanted:
                out[wanted[index]] = x
            if index >= max(taps):
                break
        return out  # type: ignore[return-value]

    def final(self, ids: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The final normed states `[B, T, W]` float32 (every block run)."""
        states = self.captured(ids, mask, [self.config.num_layers - 1])[0]
        return self.norm(states)


def build_gpt_oss(config: GptOssConfig, state: Mapping[str, torch.Tensor]) -> GptOssModel:
    """The tower of `config` holding `state` (names relative to the tower, ComfyUI's or
    transformers' expert layout), every tensor kept as given; missing or unexpected names, or a
    shape that does not fit, raise `GptOssConfigError`."""
    state = from_transformers_experts(state)
    model = GptOssModel(config)
    expected = dict(model.state_dict())
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise GptOssConfigError(f"GPT-OSS weights do not fit the tower: missing {missing[:8]}, "
                                f"unexpected {unexpected[:8]}")
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise GptOssConfigError(f"GPT-OSS: {name} has shape {tuple(tensor.shape)}, "
                                    f"expected {tuple(expected[name].shape)}")
    model.load_state_dict(dict(state), assign=True)
    return model.eval().requires_grad_(False)


__all__ = ["GptOssConfig", "GptOssConfigError", "GptOssModel", "SINKS", "build_gpt_oss", "from_transformers_experts",
           "key_masks", "yarn_tables"]
