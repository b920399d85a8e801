"""Ming-Image's text encoder (inclusionAI Ming-Image 0.1 Design): the Bailing MoE V2 "Ling mini 2.0"
thinker, a Qwen2.5-VL-style vision tower, a Qwen2-style connector and two projections, as today's
ComfyUI runs it (behaviour of ComfyUI's `comfy/text_encoders/ming_image.py`: `BailingMoeV2`,
`MingConnector`, `MingImageEncoder`), written here.

The file's names are ComfyUI's, bare (what `MingImageEncoder.state_dict()` gives):

- `thinker.*`: the token table `embed_tokens`, 20 blocks (`layers.N`: `input_layernorm`, fused
  `attention.query_key_value` (16 query, 4 key / value heads of 128, no bias), per-head RMS norms
  `attention.q_norm` / `k_norm`, `attention.dense`, `post_attention_layernorm`; block 0 a dense SwiGLU
  `mlp.{gate,up,down}_proj`, the others a mixture of experts: routers `mlp.gate` and `mlp.image_gate`
  (`proj` + float32 `expert_bias`), the expert banks `mlp.experts.gate_up_proj.weight` [E, 2I, W]
  (gate rows first) and `down_proj.weight` [E, W, I], and a shared SwiGLU `mlp.shared_experts`), `norm`;
- `vision.*`: Qwen2.5-VL's vision transformer under ComfyUI's `Qwen2VLVisionTransformer` names
  (`patch_embed.proj`, `blocks.N`, `merger`), run by `comfy_core.text_encoders.qwen25vl_vision`;
  `linear_proj.{0,2}` (Linear, GELU, Linear) to the thinker's width;
- `connector.*`: 28 Qwen2 blocks (`layers.N.self_attn.{q,k,v}_proj` with biases, `o_proj`, SwiGLU
  `mlp`, the two norms; 12 query / 2 key-value heads), `norm`;
- `query_tokens` [256, W], `proj_in` (thinker -> connector width), `proj_out` (-> 2560, the DiT's
  caption width), `proj_directvlm.{0,1}` (RMSNorm eps 1e-5 over 3 x W, Linear -> 3840, the DiT width);
- `tokenizer_json` (the tokenizer, uint8) and a `thinker.lm_head.weight` are not the network's.

The thinker (causal, over the prompt's tokens and spliced embeddings):

- RoPE on the first half of each head (`rope_dim`, base 600000) in the rotate-half form, with Ling's
  "video rope" positions: every embedding block (an image's merged patches, or the query tokens)
  takes one text position, its tokens an (h, w) grid centred there (`(i - (n - 1) // 2)` per axis);
  the first three eighths of the frequency pairs alternate row / column positions, the rest take the
  sequence position; later tokens continue one past the block;
- each mixture-of-experts block routes every token by `sigmoid(proj(x))` (float32) plus the
  expert bias: the experts fall in 8 groups, each group scored by its two best, the best 4 groups
  kept, the best 8 experts in them chosen; their weights are the plain sigmoid scores renormalised
  (sum + 1e-20) and scaled by 2.5; image tokens use `image_gate`, the others `gate`; the chosen
  experts' SwiGLUs are summed by weight, plus the shared expert;
- the inputs of blocks 5 and 12 and the final normed states are kept.

The outputs: `cap_feats` = `proj_out(connector(proj_in(h)))` over the last block's query tokens
(the connector bidirectional, 1-D RoPE base 1e6 over the full head), and `direct_context` =
`proj_directvlm(concat(block-5 input, block-12 input, final))` over the tokens before the last
`<image>` (the text, and any reference images before it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention.calling import attention_in_force
from comfy_core.models.resident import load_exact
from comfy_core.text_encoders.errors import TextEncoderDetectionError, TokenizeError

CAPTURE_LAYERS = (5, 12)  # ComfyUI's MingImageEncoder.capture_layers: inputs of these blocks
ROPE_THETA = 600000.0
CONNECTOR_THETA = 1000000.0
CONNECTOR_HEADS = 12
CONNECTOR_KV_HEADS = 2
EXPERTS_PER_TOKEN = 8
EXPERT_GROUPS = 8
GROUPS_KEPT = 4
ROUTED_SCALE = 2.5
RMS_EPS = 1e-6
DIRECT_EPS = 1e-5
IMAGE_PIXELS = 451584  # ComfyUI resizes every input image to this many pixels (672 x 672 for a square)


class MingEncoderError(TextEncoderDetectionError, ValueError):
    """The Ming-Image text encoder's tensors are incomplete or inconsistent (names the key)."""


class MingInputError(TokenizeError, ValueError):
    """Tokens the Ming-Image encoder cannot encode (no query block, an image without a tower)."""


def _shape(tensors: Mapping[str, Any], key: str, ndim: int) -> tuple[int, ...]:
    try:
        shape = tuple(int(d) for d in tensors[key].shape)
    except KeyError:
        raise MingEncoderError(f"Ming-Image text encoder key {key!r} is missing") from None
    if len(shape) != ndim:
        raise MingEncoderError(f"Ming-Image text encoder key {key!r}: expected {ndim} dimensions, got {shape}")
    return shape


def _count(tensors: Mapping[str, Any], prefix: str) -> int:
    indices = {int(name[len(prefix):].split(".", 1)[0]) for name in tensors
               if name.startswith(prefix) and name[len(prefix):].split(".", 1)[0].isdigit()}
    if not indices or sorted(indices) != list(range(max(indices) + 1)):
        raise MingEncoderError(f"Ming-Image text encoder: blocks {prefix}N are not numbered 0..n-1 ({sorted(indices)})")
    return max(indices) + 1


@dataclass(frozen=True)
class MingEncoderConfig:
    """The encoder's shape read from its tensors (ComfyUI's `BailingMoeV2Config` and
    `MingConnectorConfig` fix the real sizes; tiny files read here keep the proportions: the RoPE on
    half of each head, 3/8 of its frequency pairs spatial)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    moe_intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    num_experts: int
    connector_hidden: int
    connector_intermediate: int
    connector_layers: int
    connector_head_dim: int
    query_tokens: int
    cap_dim: int
    direct_dim: int
    vision: Any = None  # a Qwen25VisionConfig, or None (a file without `vision.*`)

    @property
    def rope_dim(self) -> int:
        return self.head_dim // 2

    @property
    def spatial_pairs(self) -> int:
        return self.rope_dim * 3 // 8  # ComfyUI: the first 24 of 32 pairs (rows / columns alternating)

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any]) -> "MingEncoderConfig":
        vocab, hidden = _shape(tensors, "thinker.embed_tokens.weight", 2)
        head_dim = _shape(tensors, "thinker.layers.0.attention.q_norm.weight", 1)[0]
        qkv_rows = _shape(tensors, "thinker.layers.0.attention.query_key_value.weight", 2)[0]
        dense_in = _shape(tensors, "thinker.layers.0.attention.dense.weight", 2)[1]
        if head_dim % 4 or dense_in % head_dim or qkv_rows % head_dim:
            raise MingEncoderError(f"Ming-Image thinker: heads of {head_dim} do not fit query_key_value "
                                   f"({qkv_rows} rows) and dense ({dense_in} inputs)")
        heads = dense_in // head_dim
        kv2 = qkv_rows // head_dim - heads
        if kv2 <= 0 or kv2 % 2 or heads % (kv2 // 2):
            raise MingEncoderError(f"Ming-Image thinker: {qkv_rows // head_dim} fused heads are not {heads} query "
                                   "heads plus key and value heads")
        layers = _count(tensors, "thinker.layers.")
        if layers <= max(CAPTURE_LAYERS):
            raise MingEncoderError(f"Ming-Image thinker: {layers} blocks, the encoder reads the inputs of blocks "
                                   f"{list(CAPTURE_LAYERS)}")
        intermediate = _shape(tensors, "thinker.layers.0.mlp.gate_proj.weight", 2)[0]
        experts, gate_up, _ = _shape(tensors, "thinker.layers.1.mlp.experts.gate_up_proj.weight", 3)
        if experts % EXPERT_GROUPS or experts // EXPERT_GROUPS < 2 or \
                GROUPS_KEPT * (experts // EXPERT_GROUPS) < EXPERTS_PER_TOKEN:
            raise MingEncoderError(f"Ming-Image thinker: {experts} experts cannot be routed in {EXPERT_GROUPS} "
                                   f"groups ({GROUPS_KEPT} kept, {EXPERTS_PER_TOKEN} experts per token)")
        c_hidden = _shape(tensors, "connector.norm.weight", 1)[0]
        q_rows = _shape(tensors, "connector.layers.0.self_attn.q_proj.weight", 2)[0]
        if q_rows % CONNECTOR_HEADS:
            raise MingEncoderError(f"Ming-Image connector: q_proj's {q_rows} rows are not {CONNECTOR_HEADS} heads")
        queries, q_width = _shape(tensors, "query_tokens", 2)
        direct_dim, direct_in = _shape(tensors, "proj_directvlm.1.weight", 2)
        if q_width != hidden or direct_in != hidden * (len(CAPTURE_LAYERS) + 1):
            raise MingEncoderError(f"Ming-Image: query_tokens ({q_width}) / proj_directvlm ({direct_in} inputs) do "
                                   f"not fit the thinker's width {hidden}")
        vision = None
        if any(name.startswith("vision.") for name in tensors):
            from comfy_core.text_encoders.qwen25vl_vision import Qwen25VLDetectionError, Qwen25VisionConfig

            out = _shape(tensors, "linear_proj.0.weight", 2)[1]
            view = {"visual." + name[len("vision."):]: t for name, t in tensors.items() if name.startswith("vision.")}
            try:
                vision = Qwen25VisionConfig.detect_from_weights(view, "", out)
            except Qwen25VLDetectionError as exc:
                raise MingEncoderError(f"Ming-Image vision tower: {exc}") from None
        return cls(vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate,
                   moe_intermediate_size=gate_up // 2, num_layers=layers, num_heads=heads, num_kv_heads=kv2 // 2,
                   head_dim=head_dim, num_experts=experts, connector_hidden=c_hidden,
                   connector_intermediate=_shape(tensors, "connector.layers.0.mlp.gate_proj.weight", 2)[0],
                   connector_layers=_count(tensors, "connector.layers."), connector_head_dim=q_rows // CONNECTOR_HEADS,
                   query_tokens=queries, cap_dim=_shape(tensors, "proj_out.weight", 2)[0], direct_dim=direct_dim,
                   vision=vision)


# --- modules (ComfyUI's names; computed in float32) ---

class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = RMS_EPS) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x.float(), (x.shape[-1],), self.weight.float(), self.eps)


def _linear(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    bias = None if layer.bias is None else layer.bias.float()
    return F.linear(x.float(), layer.weight.float(), bias)


class SwiGLU(nn.Module):
    """`down(silu(gate(x)) * up(x))` (ComfyUI's llama `MLP`)."""

    def __init__(self, width: int, inner: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(width, inner, bias=False)
        self.up_proj = nn.Linear(width, inner, bias=False)
        self.down_proj = nn.Linear(inner, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _linear(self.down_proj, F.silu(_linear(self.gate_proj, x)) * _linear(self.up_proj, x))


class Router(nn.Module):
    """Grouped sigmoid routing (ComfyUI's `BailingGate`): x [N, W] -> (expert ids, weights) [N, k]."""

    def __init__(self, width: int, experts: int) -> None:
        super().__init__()
        self.proj = nn.Linear(width, experts, bias=False)
        self.expert_bias = nn.Parameter(torch.empty(experts, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scores = torch.sigmoid(_linear(self.proj, x))  # [N, E]
        routing = scores + self.expert_bias.float()
        tokens = routing.shape[0]
        grouped = routing.view(tokens, EXPERT_GROUPS, -1)
        group_score = grouped.topk(2, dim=-1).values.sum(dim=-1)  # [N, groups]
        kept = torch.topk(group_score, k=GROUPS_KEPT, dim=-1, sorted=False).indices
        group_mask = torch.zeros(tokens, EXPERT_GROUPS, dtype=torch.bool, device=x.device).scatter_(1, kept, True)
        candidates = grouped.masked_fill(~group_mask[..., None], float("-inf")).view(tokens, -1)
        chosen = torch.topk(candidates, k=EXPERTS_PER_TOKEN, dim=-1, sorted=False).indices
        weights = torch.gather(scores, 1, chosen)
        return chosen, weights / (weights.sum(dim=-1, keepdim=True) + 1e-20) * ROUTED_SCALE


class Experts(nn.Module):
    """The expert banks (ComfyUI's `MoEExperts` layout: [E, out, in])."""

    def __init__(self, experts: int, width: int, inner: int) -> None:
        super().__init__()
        self.gate_up_proj = nn.Module()
        self.gate_up_proj.weight = nn.Parameter(torch.empty(experts, 2 * inner, width))
        self.down_proj = nn.Module()
        self.down_proj.weight = nn.Parameter(torch.empty(experts, width, inner))

    def forward(self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """x [N, W], ids / weights [N, k] -> the weighted sum of the chosen experts' SwiGLUs [N, W]."""
        out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float32, device=x.device)
        x = x.float()
        for expert in torch.unique(ids).tolist():
            token, slot = torch.nonzero(ids == expert, as_tuple=True)
            gate, up = F.linear(x[token], self.gate_up_proj.weight[expert].float()).chunk(2, dim=-1)
            y = F.linear(F.silu(gate) * up, self.down_proj.weight[expert].float())
            out.index_add_(0, token, y * weights[token, slot, None])
        return out


class SparseMoe(nn.Module):
    def __init__(self, config: MingEncoderConfig) -> None:
        super().__init__()
        w, e, i = config.hidden_size, config.num_experts, config.moe_intermediate_size
        self.gate = Router(w, e)
        self.image_gate = Router(w, e)
        self.experts = Experts(e, w, i)
        self.shared_experts = SwiGLU(w, i)

    def forward(self, x: torch.Tensor, image_mask: torch.Tensor) -> torch.Tensor:
        b, t, w = x.shape
        flat = x.reshape(-1, w)
        text_ids, text_weights = self.gate(flat)
        image_ids, image_weights = self.image_gate(flat)
        mask = image_mask.reshape(-1, 1)
        routed = self.experts(flat, torch.where(mask, image_ids, text_ids), torch.where(mask, image_weights, text_weights))
        return routed.view(b, t, w) + self.shared_experts(x)


def _rotate_half(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, H, T, d] rotated (rotate-half) by cos / sin [B or 1, T, d]."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos[:, None] + rotated * sin[:, None]


class BailingAttention(nn.Module):
    def __init__(self, config: MingEncoderConfig) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = config.num_heads, config.num_kv_heads, config.head_dim
        self.rope_dim = config.rope_dim
        self.query_key_value = nn.Linear(config.hidden_size, (self.heads + 2 * self.kv_heads) * self.head_dim, bias=False)
        self.q_norm = RMSNorm(self.head_dim)
        self.k_norm = RMSNorm(self.head_dim)
        self.dense = nn.Linear(self.heads * self.head_dim, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, bias: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        qkv = _linear(self.query_key_value, x).view(b, t, -1, self.head_dim).transpose(1, 2)  # [B, H', T, d]
        q, k, v = qkv.split((self.heads, self.kv_heads, self.kv_heads), dim=1)
        q, k = self.q_norm(q), self.k_norm(k)
        r = self.rope_dim
        q = torch.cat((_rotate_half(q[..., :r], cos, sin), q[..., r:]), dim=-1)
        k = torch.cat((_rotate_half(k[..., :r], cos, sin), k[..., r:]), dim=-1)
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        out = attention_in_force(q, k, v, self.heads, mask=bias, skip_reshape=True)  # [B, T, H*d]
        return _linear(self.dense, out)


class BailingBlock(nn.Module):
    def __init__(self, config: MingEncoderConfig, index: int) -> None:
        super().__init__()
        self.attention = BailingAttention(config)
        self.input_layernorm = RMSNorm(config.hidden_size)
        self.post_attention_layernorm = RMSNorm(config.hidden_size)
        self.dense = index == 0  # ComfyUI: the first block's feed-forward is dense
        self.mlp = SwiGLU(config.hidden_size, config.intermediate_size) if self.dense else SparseMoe(config)

    def forward(self, x: torch.Tensor, bias: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                image_mask: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.input_layernorm(x), bias, cos, sin)
        h = self.post_attention_layernorm(x)
        return x + (self.mlp(h) if self.dense else self.mlp(h, image_mask))


Block = tuple[int, int, int]  # (start, rows, columns) of an embedding block in the sequence


def video_rope_positions(length: int, blocks: Sequence[Block], device: Any = None
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Ling's "video rope" positions (t, h, w) [T] float32 of a sequence with `blocks` (see the
    module docstring): each block one position, its tokens centred on it row- and column-wise."""
    t = torch.arange(length, device=device, dtype=torch.float32)
    for start, rows, cols in blocks:
        t[start + rows * cols:] -= rows * cols - 1
    h, w = t.clone(), t.clone()
    shift = 0
    for start, rows, cols in blocks:
        end = start + rows * cols
        base = start - shift
        t[start:end] = base
        h[start:end] = base + (torch.arange(rows, device=device) - (rows - 1) // 2).repeat_interleave(cols)
        w[start:end] = base + (torch.arange(cols, device=device) - (cols - 1) // 2).repeat(rows)
        shift += rows * cols - 1
    return t, h, w


def thinker_rope(config: MingEncoderConfig, length: int, blocks: Sequence[Block], device: Any = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [1, T, rope_dim] of the thinker's partial rotary embedding."""
    t, h, w = video_rope_positions(length, blocks, device)
    r = config.rope_dim
    inv_freq = 1.0 / (ROPE_THETA ** (torch.arange(0, r, 2, device=device, dtype=torch.float32) / r))
    freqs = t[:, None] * inv_freq
    s = config.spatial_pairs
    freqs[:, 0:s:2] = h[:, None] * inv_freq[0:s:2]
    freqs[:, 1:s:2] = w[:, None] * inv_freq[1:s:2]
    angles = torch.cat((freqs, freqs), dim=-1)[None]
    return angles.cos(), angles.sin()


class Thinker(nn.Module):
    """Bailing MoE V2 (ComfyUI's `BailingMoeV2`)."""

    def __init__(self, config: MingEncoderConfig) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(BailingBlock(config, i) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor, blocks: Sequence[Block],
                capture: Sequence[int] = CAPTURE_LAYERS) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """x [B, T, W] embeddings, attention_mask [B, T] (1 = a token) -> (final normed states,
        [inputs of the `capture` blocks..., final normed states])."""
        b, t, _ = x.shape
        cos, sin = thinker_rope(self.config, t, blocks, x.device)
        low = torch.finfo(torch.float32).min / 4
        bias = torch.full((t, t), low, dtype=torch.float32, device=x.device).triu_(1)
        bias = bias + (attention_mask.to(x.device) == 0).float()[:, None, None, :] * low  # [B, 1, T, T]
        image_mask = torch.zeros(b, t, dtype=torch.bool, device=x.device)
        for start, rows, cols in blocks:
            image_mask[:, start:start + rows * cols] = True
        x = x.float()
        captured = []
        for index, layer in enumerate(self.layers):
            if index in capture:
                captured.append(x)
            x = layer(x, bias, cos, sin, image_mask)
        x = self.norm(x)
        captured.append(x)
        return x, captured


class ConnectorAttention(nn.Module):
    def __init__(self, width: int, head_dim: int) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.q_proj = nn.Linear(width, CONNECTOR_HEADS * head_dim, bias=True)
        self.k_proj = nn.Linear(width, CONNECTOR_KV_HEADS * head_dim, bias=True)
        self.v_proj = nn.Linear(width, CONNECTOR_KV_HEADS * head_dim, bias=True)
        self.o_proj = nn.Linear(CONNECTOR_HEADS * head_dim, width, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        d = self.head_dim
        q = _linear(self.q_proj, x).view(b, t, CONNECTOR_HEADS, d).transpose(1, 2)
        k = _linear(self.k_proj, x).view(b, t, CONNECTOR_KV_HEADS, d).transpose(1, 2)
        v = _linear(self.v_proj, x).view(b, t, CONNECTOR_KV_HEADS, d).transpose(1, 2)
        q, k = _rotate_half(q, cos, sin), _rotate_half(k, cos, sin)
        rep = CONNECTOR_HEADS // CONNECTOR_KV_HEADS
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        return _linear(self.o_proj, attention_in_force(q, k, v, CONNECTOR_HEADS, skip_reshape=True))


class ConnectorBlock(nn.Module):
    def __init__(self, config: MingEncoderConfig) -> None:
        super().__init__()
        self.self_attn = ConnectorAttention(config.connector_hidden, config.connector_head_dim)
        self.mlp = SwiGLU(config.connector_hidden, config.connector_intermediate)
        self.input_layernorm = RMSNorm(config.connector_hidden)
        self.post_attention_layernorm = RMSNorm(config.connector_hidden)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Connector(nn.Module):
    """Qwen2 blocks without a causal mask (ComfyUI's `MingConnector`)."""

    def __init__(self, config: MingEncoderConfig) -> None:
        super().__init__()
        self.head_dim = config.connector_head_dim
        self.layers = nn.ModuleList(ConnectorBlock(config) for _ in range(config.connector_layers))
        self.norm = RMSNorm(config.connector_hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = self.head_dim
        inv_freq = 1.0 / (CONNECTOR_THETA ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
        freqs = torch.arange(x.shape[1], device=x.device, dtype=torch.float32)[:, None] * inv_freq
        angles = torch.cat((freqs, freqs), dim=-1)[None]
        cos, sin = angles.cos(), angles.sin()
        x = x.float()
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.norm(x)


class _VisionAttention(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.qkv = nn.Linear(width, 3 * width, bias=True)
        self.proj = nn.Linear(width, width, bias=True)


class _VisionMLP(nn.Module):
    def __init__(self, width: int, inner: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(width, inner, bias=True)
        self.up_proj = nn.Linear(width, inner, bias=True)
        self.down_proj = nn.Linear(inner, width, bias=True)


class _VisionBlock(nn.Module):
    def __init__(self, width: int, inner: int) -> None:
        super().__init__()
        self.norm1 = RMSNorm(width)
        self.norm2 = RMSNorm(width)
        self.attn = _VisionAttention(width)
        self.mlp = _VisionMLP(width, inner)


class _PatchEmbed(nn.Module):
    def __init__(self, vision: Any) -> None:
        super().__init__()
        kernel = (vision.temporal_patch_size, vision.patch_size, vision.patch_size)
        self.proj = nn.Conv3d(vision.in_channels, vision.hidden_size, kernel, stride=kernel, bias=False)


class _Merger(nn.Module):
    def __init__(self, vision: Any) -> None:
        super().__init__()
        merged = vision.hidden_size * vision.spatial_merge_size ** 2
        self.ln_q = RMSNorm(vision.hidden_size)
        self.mlp = nn.Sequential(nn.Linear(merged, merged), nn.GELU(), nn.Linear(merged, vision.out_hidden_size))


class VisionTower(nn.Module):
    """The Qwen2.5-VL vision transformer's module tree under ComfyUI's (= transformers') names
    (`patch_embed.proj`, `blocks.N.{norm1, attn.qkv, attn.proj, norm2, mlp.*}`, `merger`); its
    forward pass is `qwen25vl_vision.encode_image_patches`."""

    def __init__(self, vision: Any) -> None:
        super().__init__()
        self.patch_embed = _PatchEmbed(vision)
        self.blocks = nn.ModuleList(_VisionBlock(vision.hidden_size, vision.intermediate_size)
                                    for _ in range(vision.depth))
        self.merger = _Merger(vision)


class MingImageEncoder(nn.Module):
    """The whole encoder (ComfyUI's `MingImageEncoder`): see the module docstring."""

    def __init__(self, config: MingEncoderConfig) -> None:
        super().__init__()
        self.config = config
        w = config.hidden_size
        self.thinker = Thinker(config)
        self.vision = None
        if config.vision is not None:
            self.vision = VisionTower(config.vision)
            self.linear_proj = nn.Sequential(nn.Linear(config.vision.out_hidden_size, w), nn.GELU(), nn.Linear(w, w))
        self.connector = Connector(config)
        self.query_tokens = nn.Parameter(torch.empty(config.query_tokens, w))
        self.proj_in = nn.Linear(w, config.connector_hidden)
        self.proj_out = nn.Linear(config.connector_hidden, config.cap_dim)
        direct_in = w * (len(CAPTURE_LAYERS) + 1)
        self.proj_directvlm = nn.Sequential(RMSNorm(direct_in, DIRECT_EPS), nn.Linear(direct_in, config.direct_dim))

    def get_input_embeddings(self) -> nn.Module:
        return self.thinker.embed_tokens

    def image_embedding(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """IMAGE [B, H, W, 3] -> (unit-length tokens [N, W] float32, patch grid [1, 3]): ComfyUI's
        `preprocess_embed` (the first image, resized to 451,584 pixels, through the tower and
        `linear_proj`)."""
        from comfy_core.text_encoders.qwen25vl_vision import encode_image_patches, preprocess_image

        if self.vision is None:
            raise MingInputError("Ming-Image: this text encoder file has no vision tower (vision.*), so it cannot "
                                 "read images")
        patches, grid = preprocess_image(image, self.config.vision, min_pixels=IMAGE_PIXELS, max_pixels=IMAGE_PIXELS)
        feats = encode_image_patches(self.vision, self.config.vision, patches, grid)
        lin0, lin2 = self.linear_proj[0], self.linear_proj[2]
        return F.normalize(_linear(lin2, F.gelu(_linear(lin0, feats))), dim=-1), grid

    def encode_embeddings(self, embeds: torch.Tensor, attention_mask: torch.Tensor, blocks: Sequence[Block]
                          ) -> tuple[torch.Tensor, torch.Tensor]:
        """embeds [B, T, W] with the blocks spliced in, attention_mask [B, T], blocks (start, rows,
        columns) in order, the query tokens last -> (cap_feats [B, Q, cap_dim], direct_context
        [B, start - 1, direct_dim]) float32."""
        if not blocks:
            raise MingInputError("Ming-Image: the prompt has no <imagePatch> query block")
        start, _, size = blocks[-1]
        hidden, captured = self.thinker(embeds, attention_mask, blocks)
        cap = _linear(self.proj_out, self.connector(_linear(self.proj_in, hidden[:, start:start + size])))
        direct = torch.cat([c[:, :start - 1] for c in captured], dim=-1)
        norm, linear = self.proj_directvlm[0], self.proj_directvlm[1]
        return cap.float(), _linear(linear, norm(direct)).float()


def build_encoder(state: Mapping[str, torch.Tensor]) -> MingImageEncoder:
    """The encoder holding `state` (ComfyUI's names, `tokenizer_json` / `thinker.lm_head.weight`
    left out by the caller), every tensor kept as given; missing, unexpected or misshapen names
    raise `MingEncoderError`."""
    from comfy_core.checkpoint.meta_build import meta_build

    config = MingEncoderConfig.detect_from_weights(state)
    with meta_build():
        model = MingImageEncoder(config)
    return load_exact(model, dict(state), what="Ming-Image text encoder", error=MingEncoderError, assign=True)


__all__ = ["CAPTURE_LAYERS", "IMAGE_PIXELS", "MingEncoderConfig", "MingEncoderError", "MingImageEncoder",
           "MingInputError", "build_encoder", "thinker_rope", "video_rope_positions"]
