"""The CLIP text transformer (Radford et al. 2021, "Learning Transferable Visual Models From Natural
Language Supervision"), written here with transformers' `CLIPTextModelWithProjection` module and
parameter names, so that every key layout `convert.py` maps onto those names loads unchanged.

Why not transformers' class: importing `transformers.models.clip.modeling_clip` costs ~2.5 s on a
small CPU (it pulls in torch._dynamo and torch.distributed.tensor), paid by the first prompt of a
fresh server, and ComfyUI, which has its own module too (comfy/clip_model.py), does not pay it.
The forward is the standard pre-LayerNorm transformer: token + learned position embeddings; per
layer `x + attn(ln1(x))` then `x + mlp(ln2(x))` with a causal mask; a final LayerNorm;
`text_projection` (no bias) for the pooled EOS state. `tests/comfy_core/test_text_encoders_parity.py`
checks it against transformers' own forward on the same weights.

Only what `ClipTextEncoder` (encoder.py) and packs reach for exists: `text_model.embeddings`
(`token_embedding`, `position_embedding`, `position_ids`), `text_model.encoder.layers`,
`text_model.final_layer_norm`, `text_projection`, `get_input_embeddings()` /
`set_input_embeddings()`, `config`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention.kernels import naive_attention


@dataclass(frozen=True)
class ClipTextModelConfig:
    """The shape of one tower (what `ClipTextConfig.to_model_config()` gives)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    max_position_embeddings: int
    projection_dim: int
    hidden_act: str = "quick_gelu"  # OpenAI CLIP-L; OpenCLIP ViT-H / bigG use "gelu"
    layer_norm_eps: float = 1e-5


def _activation(name: str):
    if name == "quick_gelu":
        return lambda x: x * torch.sigmoid(1.702 * x)
    if name == "gelu":
        return F.gelu
    raise ValueError(f"unknown CLIP activation {name!r}; expected 'quick_gelu' or 'gelu'")


class ClipTextEmbeddings(nn.Module):
    def __init__(self, config: ClipTextModelConfig) -> None:
        super().__init__()
        self.token_embedding = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position_embedding = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.register_buffer("position_ids", torch.arange(config.max_position_embeddings).expand((1, -1)),
                             persistent=False)

    def forward(self, input_ids: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                inputs_embeds: torch.Tensor | None = None) -> torch.Tensor:
        """Token embeddings (or `inputs_embeds` [B, T, W]) plus position embeddings -> [B, T, W]."""
        if inputs_embeds is None:
            inputs_embeds = self.token_embedding(input_ids)
        length = inputs_embeds.shape[1]
        if position_ids is None:
            position_ids = self.position_ids[:, :length]
        return inputs_embeds + self.position_embedding(position_ids)


class ClipAttention(nn.Module):
    def __init__(self, config: ClipTextModelConfig) -> None:
        super().__init__()
        width = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = width // self.num_heads
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.q_proj = nn.Linear(width, width)
        self.k_proj = nn.Linear(width, width)
        self.v_proj = nn.Linear(width, width)
        self.out_proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, T, W]; `attention_mask` additive, broadcastable to [B, heads, T, T] -> [B, T, W]."""
        b, t, w = x.shape

        def heads(projection: nn.Linear) -> torch.Tensor:
            return projection(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)  # [B, H, T, d]

        q, k, v = heads(self.q_proj), heads(self.k_proj), heads(self.v_proj)
        if x.device.type == "cpu":
            # ComfyUI's rule for small inputs (comfy/ldm/modules/attention.py
            # `optimized_attention_for_device(small_input=True)`): where PyTorch attention is not
            # enabled, as on a CPU, its basic attention (scores, softmax, product); the same
            # operations here give its text conditioning to the bit. PyTorch's SDPA elsewhere.
            out = naive_attention(q, k, v, attention_mask)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask, scale=self.scale)
        return self.out_proj(out.transpose(1, 2).reshape(b, t, w))


class ClipMlp(nn.Module):
    def __init__(self, config: ClipTextModelConfig) -> None:
        super().__init__()
        self.activation = _activation(config.hidden_act)
        self.fc1 = nn.Linear(config.hidden_size, config.intermediate_size)
        self.fc2 = nn.Linear(config.intermediate_size, config.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.activation(self.fc1(x)))


class ClipEncoderLayer(nn.Module):
    def __init__(self, config: ClipTextModelConfig) -> None:
        super().__init__()
        self.self_attn = ClipAttention(config)
        self.layer_norm1 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.mlp = ClipMlp(config)
        self.layer_norm2 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                *args: object, **kwargs: object) -> torch.Tensor:
        x = hidden_states + self.self_attn(self.layer_norm1(hidden_states), attention_mask)
        return x + self.mlp(self.layer_norm2(x))


class ClipEncoder(nn.Module):
    def __init__(self, config: ClipTextModelConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(ClipEncoderLayer(config) for _ in range(config.num_hidden_layers))


class ClipTextTransformer(nn.Module):
    def __init__(self, config: ClipTextModelConfig) -> None:
        super().__init__()
        self.embeddings = ClipTextEmbeddings(config)
        self.encoder = ClipEncoder(config)
        self.final_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)


class ClipTextModelWithProjection(nn.Module):
    """transformers' `CLIPTextModelWithProjection` layout: `text_model.*` and `text_projection`."""

    def __init__(self, config: ClipTextModelConfig) -> None:
        super().__init__()
        self.config = config
        self.text_model = ClipTextTransformer(config)
        self.text_projection = nn.Linear(config.hidden_size, config.projection_dim, bias=False)

    def get_input_embeddings(self) -> nn.Module:
        return self.text_model.embeddings.token_embedding

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.text_model.embeddings.token_embedding = value
