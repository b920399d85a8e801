"""Jina CLIP v2's text tower (Koukounas et al. 2024, "jina-clip-v2: Multilingual Multimodal
Embeddings for Text and Images", arXiv 2412.08802): Jina's XLM-RoBERTa with rotary positions, as
ComfyUI's `comfy/text_encoders/jina_clip_2.py` runs it for NewBie-Image (its pooled text).

Weights: ComfyUI's names under `model.` (the repackaged `jina_clip_v2_bf16.safetensors`):
`embeddings.word_embeddings` (250002 x 1024), `embeddings.token_type_embeddings` (one type),
`emb_ln`, then `encoder.layers.N` with `mixer.Wqkv` (fused q / k / v, biased), `mixer.out_proj`,
`norm1`, `mlp.fc1` / `mlp.fc2`, `norm2`. What the weights cannot show is ComfyUI's
`XLMRobertaConfig` (Jina Embeddings v3's): heads of 64 channels (16 for the 1024-wide tower), RoPE
base 20000 over the whole head (halves rotated, positions 0..T-1), LayerNorm eps 1e-5, exact GELU.

The forward pass (equal to transformers' `JinaEmbeddingsV3Model`, post-norm blocks):
`x = LN(word(ids) + type[0])`; per block `x = norm1(x + out(attn(rope(q), rope(k), v)))`,
`x = norm2(x + fc2(gelu(fc1(x))))`; keys outside the token mask are excluded. The pooled output is
the mean of the last states over the unmasked tokens (Jina CLIP's mean pooling); the conditioning
is the last states. Computed in float32.

Tokenizer: SentencePiece over the file's own model (`spiece_model`, as ComfyUI's
`JinaClip2Tokenizer`: the model's `<s>`, the prompt, `</s>` (2), pad 1, no padding to a length, 8192
tokens a chunk, prompt weights parsed); a file without it needs the model given as
`tokenizer_data`. No vocabulary of Jina's ships with this repository.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.text_encoders.decoder_llm import apply_overrides
from comfy_core.text_encoders.errors import TextEncoderDetectionError, TextEncoderKeyError, TokenizeError
from comfy_core.text_encoders.gemma_tokenizer import SPIECE_KEY, GemmaSentencePiece, GemmaTokenizer
from comfy_core.text_encoders.qwen_tokenizer import QwenTokenizer
from comfy_core.text_encoders.token_chunks import chunks_to_ids
from comfy_core.text_encoders.tower_options import TowerOptions
from comfy_core.text_encoders.weighting import interpolate_from_empty

JINA_SLOT = "jina_clip_2"
MARKER = "model.encoder.layers.0.mixer.Wqkv.weight"
HEAD_DIM = 64
ROPE_THETA = 20000.0
LN_EPS = 1e-5
START_ID, PAD_ID, END_ID = 0, 1, 2
MAX_LENGTH = 8192
JINA_SPIECE_KEY = "jina_spiece_model"  # ComfyUI's tokenizer_data key for it beside Gemma's
_IGNORED_KEYS = (SPIECE_KEY, "logit_scale")


class JinaDetectionError(TextEncoderDetectionError):
    """Jina XLM-RoBERTa weights that are incomplete or inconsistent."""


class JinaKeyError(TextEncoderKeyError):
    """A tensor under the tower's prefix that the tower does not have."""


@dataclass(frozen=True)
class JinaConfig:
    """One Jina XLM-RoBERTa text tower (ComfyUI's `XLMRobertaConfig` defaults: Jina CLIP v2's)."""

    vocab_size: int = 250002
    hidden_size: int = 1024
    num_layers: int = 24
    num_heads: int = 16
    intermediate_size: int = 4096
    type_vocab_size: int = 1
    rope_theta: float = ROPE_THETA
    eps: float = LN_EPS
    prefix: str = ""
    slot: str = JINA_SLOT
    dtype: str = "F32"

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def width(self) -> int:
        return self.hidden_size

    @property
    def layers(self) -> int:
        return self.num_layers

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "JinaConfig | None":
        """The tower under `prefix` from names and shapes (None: no Jina tower there)."""
        if prefix + MARKER not in tensors:
            return None

        def shape(name: str) -> tuple[int, ...]:
            if prefix + name not in tensors:
                raise JinaDetectionError(f"Jina CLIP: {prefix + name!r} is missing")
            return tuple(tensors[prefix + name].shape)

        vocab, width = shape("model.embeddings.word_embeddings.weight")
        if width % HEAD_DIM:
            raise JinaDetectionError(f"Jina CLIP: width {width} is not a multiple of {HEAD_DIM}-channel heads")
        if shape("model.encoder.layers.0.mixer.Wqkv.weight") != (3 * width, width):
            raise JinaDetectionError(f"Jina CLIP: Wqkv is {list(shape('model.encoder.layers.0.mixer.Wqkv.weight'))}, "
                                     f"not [{3 * width}, {width}]")
        layers = 0
        while prefix + f"model.encoder.layers.{layers}.mixer.Wqkv.weight" in tensors:
            layers += 1
        dtype = str(getattr(tensors[prefix + MARKER], "dtype", "F32"))
        return cls(vocab_size=vocab, hidden_size=width, num_layers=layers, num_heads=width // HEAD_DIM,
                   intermediate_size=shape("model.encoder.layers.0.mlp.fc1.weight")[0],
                   type_vocab_size=shape("model.embeddings.token_type_embeddings.weight")[0], prefix=prefix,
                   dtype=dtype)


# --- the network (ComfyUI's module names) ---

class _Embeddings(nn.Module):
    def __init__(self, config: JinaConfig, dtype: Any) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, dtype=dtype, device="meta")
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size, dtype=dtype,
                                                  device="meta")


class _Mixer(nn.Module):
    def __init__(self, config: JinaConfig, dtype: Any) -> None:
        super().__init__()
        w = config.hidden_size
        self.Wqkv = nn.Linear(w, 3 * w, dtype=dtype, device="meta")
        self.out_proj = nn.Linear(w, w, dtype=dtype, device="meta")


class _MLP(nn.Module):
    def __init__(self, config: JinaConfig, dtype: Any) -> None:
        super().__init__()
        self.fc1 = nn.Linear(config.hidden_size, config.intermediate_size, dtype=dtype, device="meta")
        self.fc2 = nn.Linear(config.intermediate_size, config.hidden_size, dtype=dtype, device="meta")


class _Block(nn.Module):
    def __init__(self, config: JinaConfig, dtype: Any) -> None:
        super().__init__()
        w = config.hidden_size
        self.mixer = _Mixer(config, dtype)
        self.norm1 = nn.LayerNorm(w, eps=config.eps, dtype=dtype, device="meta")
        self.mlp = _MLP(config, dtype)
        self.norm2 = nn.LayerNorm(w, eps=config.eps, dtype=dtype, device="meta")


class _Encoder(nn.Module):
    def __init__(self, config: JinaConfig, dtype: Any) -> None:
        super().__init__()
        self.layers = nn.ModuleList(_Block(config, dtype) for _ in range(config.num_layers))


class XLMRobertaModel_(nn.Module):  # noqa: N801  (ComfyUI's class name)
    """ComfyUI's `XLMRobertaModel_`: the modules whose state-dict names the files use."""

    def __init__(self, config: JinaConfig, dtype: Any) -> None:
        super().__init__()
        self.embeddings = _Embeddings(config, dtype)
        self.emb_ln = nn.LayerNorm(config.hidden_size, eps=config.eps, dtype=dtype, device="meta")
        self.encoder = _Encoder(config, dtype)


class XLMRobertaModel(nn.Module):
    """ComfyUI's `XLMRobertaModel` (the SDClipModel's `transformer`): the network as `model`."""

    def __init__(self, config: JinaConfig, dtype: Any = None) -> None:
        super().__init__()
        self.model = XLMRobertaModel_(config, dtype)
        self.num_layers = config.num_layers

    def get_input_embeddings(self) -> nn.Module:
        return self.model.embeddings.word_embeddings

    def set_input_embeddings(self, embeddings: nn.Module) -> None:
        self.model.embeddings.word_embeddings = embeddings


def _f32(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A Linear applied in float32 whatever its storage dtype."""
    weight = module.weight.to(device=x.device, dtype=torch.float32)
    bias = None if module.bias is None else module.bias.to(device=x.device, dtype=torch.float32)
    return F.linear(x, weight, bias)


def _ln32(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A LayerNorm applied in float32 whatever its storage dtype."""
    weight = module.weight.to(device=x.device, dtype=torch.float32)
    bias = module.bias.to(device=x.device, dtype=torch.float32)
    return F.layer_norm(x, module.normalized_shape, weight, bias, module.eps)


def rope_tables(length: int, head_dim: int, theta: float, device: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin `[T, head_dim]` of positions 0..T-1, frequencies repeated over both halves."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim))
    angles = torch.outer(torch.arange(length, dtype=torch.float32, device=device), inv_freq)
    emb = torch.cat([angles, angles], dim=-1)
    return emb.cos(), emb.sin()


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def run_jina(model: XLMRobertaModel_, config: JinaConfig, embeds: torch.Tensor,
             attention_mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Input embeddings `[B, T, W]` (word embeddings, float32) and the token mask `[B, T]` (1 attend)
    -> (last states `[B, T, W]`, mean-pooled `[B, W]`), float32 (see the module doc)."""
    b, t, w = embeds.shape
    h, d = config.num_heads, config.head_dim
    x = embeds + model.embeddings.token_type_embeddings.weight[0].to(device=embeds.device, dtype=torch.float32)
    x = _ln32(model.emb_ln, x)
    bias = None
    if attention_mask is not None:
        keep = attention_mask.to(device=x.device, dtype=torch.bool)[:, None, None, :]  # [B, 1, 1, T]
        bias = torch.zeros(keep.shape, dtype=torch.float32, device=x.device).masked_fill(
            ~keep, torch.finfo(torch.float32).min)
    cos, sin = rope_tables(t, d, config.rope_theta, x.device)  # [T, d]
    cos, sin = cos[None, None], sin[None, None]
    for block in model.encoder.layers:
        qkv = _f32(block.mixer.Wqkv, x).view(b, t, 3, h, d)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))  # [B, H, T, d]
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias).transpose(1, 2).reshape(b, t, w)
        x = _ln32(block.norm1, _f32(block.mixer.out_proj, out) + x)
        x = _ln32(block.norm2, _f32(block.mlp.fc2, F.gelu(_f32(block.mlp.fc1, x))) + x)
    if attention_mask is None:
        pooled = x.mean(dim=1)
    else:
        m = attention_mask.to(device=x.device, dtype=torch.float32)
        pooled = (x * m.unsqueeze(-1)).sum(dim=1) / m.sum(dim=-1, keepdim=True)
    return x, pooled


# --- the tower (ComfyUI's SDClipModel surface) ---

@dataclass(frozen=True)
class JinaOptions:
    """How the tower runs when no encoder set gave it options (ComfyUI's `JinaClip2TextModel`)."""

    slot: str = JINA_SLOT
    token_key: str = "jina"
    pad_token: int = PAD_ID
    layer_idx: int | None = None
    layer_norm_hidden: bool = False


def jina_token_mask(rows: Sequence[Sequence[Any]], end_token: int) -> torch.Tensor:
    """[B, T] ComfyUI's `SDClipModel` mask for a tower with an end token: 1 up to and including the
    first end token, 0 after it; embedding vectors count 1."""
    masks = []
    for row in rows:
        mask, ended = [], False
        for token in row:
            mask.append(0 if ended else 1)
            if not isinstance(token, torch.Tensor) and int(token) == end_token:
                ended = True
        masks.append(mask)
    return torch.tensor(masks, dtype=torch.long)


class JinaClip2TextModel(TowerOptions, nn.Module):
    """One Jina CLIP v2 text tower (ComfyUI's `JinaClip2TextModel`): `encode_token_weights` gives
    (last states, mean-pooled, {"attention_mask"})."""

    options: Any = None
    can_generate = False

    def __init__(self, config: JinaConfig, transformer: XLMRobertaModel) -> None:
        super().__init__()
        self.config = config
        self.transformer = transformer
        self.enable_attention_masks = True
        self.return_attention_masks = True
        self.options = self.default_options = JinaOptions(slot=config.slot)

    @property
    def special_tokens(self) -> dict[str, int]:
        return {"start": START_ID, "end": END_ID, "pad": int(getattr(self.options, "pad_token", PAD_ID))}

    @property
    def num_layers(self) -> int:
        return self.config.num_layers

    @property
    def width(self) -> int:
        return self.config.hidden_size

    @property
    def dtype(self) -> torch.dtype:
        return self.token_embedding().weight.dtype

    @property
    def layer_idx(self) -> int | None:
        return None

    @property
    def layer(self) -> str:
        return "last"

    def set_clip_options(self, options: Mapping[str, Any]) -> None:
        """ComfyUI's `set_clip_options`: the tower reads only its last states (intermediate outputs
        are not implemented in ComfyUI's either)."""

    def token_embedding(self) -> nn.Module:
        return self.transformer.get_input_embeddings()

    def load_sd(self, sd: Mapping[str, torch.Tensor]) -> Any:
        return self.transformer.load_state_dict(sd, strict=False)

    def empty_tokens(self, length: int) -> list[int]:
        """ComfyUI's `gen_empty_tokens`: start, end, then pads."""
        return ([START_ID, END_ID] + [self.special_tokens["pad"]] * length)[:max(length, 2)]

    def forward(self, tokens: Any) -> tuple:
        """Token rows -> (last states [B, T, W], pooled [B, W], {"attention_mask": [B, T]}), float32."""
        rows = tokens.tolist() if isinstance(tokens, torch.Tensor) else [list(row) for row in tokens]
        ids, overrides = chunks_to_ids(rows, self.width, mismatch_pad=self.special_tokens["pad"])
        mask = jina_token_mask(rows, END_ID)
        if mask.shape != ids.shape:
            mask = torch.cat([mask, torch.zeros(mask.shape[0], ids.shape[1] - mask.shape[1], dtype=mask.dtype)], 1)
        if ids.dim() != 2:
            raise TokenizeError(f"jina: token ids must be [batch, tokens], got shape {tuple(ids.shape)}")
        table = self.token_embedding().weight
        ids = ids.to(device=table.device, dtype=torch.long)
        if ids.numel() and (int(ids.max()) >= self.config.vocab_size or int(ids.min()) < 0):
            raise TokenizeError(f"jina: token id {int(ids.max())} is outside this encoder's "
                                f"{self.config.vocab_size}-token vocabulary")
        x = F.embedding(ids, table).float()  # [B, T, W]
        if overrides:
            x = apply_overrides(x, overrides, "jina")
        hidden, pooled = run_jina(self.transformer.model, self.config, x,
                                  mask if self.enable_attention_masks else None)
        return hidden, pooled, {"attention_mask": mask.to(hidden.device)}

    def encode(self, tokens: Any) -> tuple:
        return self(tokens)

    def encode_token_weights(self, token_weight_pairs: Sequence[Sequence[Any]]) -> tuple:
        """ComfyUI's `encode_token_weights`: chunks -> (cond [1, n*T, W], the first chunk's pooled
        [1, W], {"attention_mask"}); weights other than 1 interpolate from an empty row."""
        rows = [[pair[0] for pair in chunk] for chunk in token_weight_pairs]
        weights = [[float(pair[1]) for pair in chunk] for chunk in token_weight_pairs]
        has_weights = any(w != 1.0 for row in weights for w in row)
        sections = len(rows)
        to_encode = list(rows)
        if has_weights or sections == 0:
            to_encode.append(self.empty_tokens(max((len(r) for r in rows), default=0)))
        width = max(len(r) for r in to_encode)
        to_encode = [list(r) + [self.special_tokens["pad"]] * (width - len(r)) for r in to_encode]
        with torch.no_grad():
            hidden, pooled, extra = self(to_encode)
        if sections == 0:
            return hidden[-1:], pooled[-1:], {"attention_mask": extra["attention_mask"][-1:]}
        parts = []
        for index in range(sections):
            z = hidden[index]
            if has_weights:
                z = interpolate_from_empty(z, hidden[-1], torch.tensor(weights[index] + [1.0] * (width - len(
                    weights[index])), device=z.device))
            parts.append(z[None])
        mask = extra["attention_mask"][:sections].flatten().unsqueeze(0)
        return torch.cat(parts, dim=-2), pooled[0:1], {"attention_mask": mask}


def jina_state_dict(config: JinaConfig, state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The file's tensors under `config.prefix` -> `XLMRobertaModel` names; unknown keys are a
    `JinaKeyError`, never dropped."""
    expected = set(XLMRobertaModel(config, None).state_dict())
    out: dict[str, torch.Tensor] = {}
    for name, tensor in state_dict.items():
        if not name.startswith(config.prefix):
            continue
        key = name[len(config.prefix):]
        if key in _IGNORED_KEYS:
            continue
        if key not in expected:
            raise JinaKeyError(f"Jina CLIP: unexpected tensor {name!r}")
        out[key] = tensor
    missing = sorted(expected - set(out))
    if missing:
        raise JinaKeyError(f"Jina CLIP: {len(missing)} tensors missing, e.g. {', '.join(missing[:3])}")
    return out


def build_jina_encoder(config: JinaConfig, state_dict: Mapping[str, torch.Tensor],
                       dtype: torch.dtype | None = None) -> JinaClip2TextModel:
    """Build on the meta device and assign the file's tensors (`dtype`: storage dtype, None keeps
    the file's; computation is float32)."""
    state = jina_state_dict(config, state_dict)
    if dtype is not None:
        state = {k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}
    transformer = XLMRobertaModel(config, dtype)
    transformer.load_state_dict(state, strict=True, assign=True)
    return JinaClip2TextModel(config, transformer.eval())


# --- the tokenizer ---

class JinaTokenizer(GemmaTokenizer):
    """ComfyUI's `JinaClip2Tokenizer` (see the module doc): the start and end tokens of the file's
    SentencePiece model around each chunk of at most 8192 tokens, no padding."""

    def __init__(self, embedding_key: str = JINA_SLOT, embedding_width: int = 1024, min_length: int | None = 1,
                 min_padding: int | None = None, max_length: int = MAX_LENGTH, pad_token: int = PAD_ID,
                 embedding_lookup: Any = None, disable_weights: bool = False,
                 backend: GemmaSentencePiece | None = None) -> None:
        super().__init__(embedding_key, embedding_width, min_length, min_padding, max_length, pad_token,
                         embedding_lookup, disable_weights, backend)
        self.end_token = END_ID  # ComfyUI's JinaClip2Tokenizer: end_token=2, the start token the model's <s>

    def _pack(self, groups: list[list[tuple[Any, float]]], min_length: int | None,
              min_padding: int | None) -> list[list[tuple]]:
        saved = self.max_length
        self.max_length = saved - 2  # room for the start and end tokens
        try:
            chunks = QwenTokenizer._pack(self, groups, None, None)  # the groups alone, no start token
        finally:
            self.max_length = saved
        chunks = [[(self.start_token, 1.0, 0)] + chunk + [(self.end_token, 1.0, 0)] for chunk in chunks]
        last = chunks[-1]
        if min_padding is not None:
            last.extend([(self.pad_token, 1.0, 0)] * int(min_padding))
        if min_length is not None and len(last) < min_length:
            last.extend([(self.pad_token, 1.0, 0)] * (int(min_length) - len(last)))
        return chunks


def jina_tokenizer(tokenizer_data: Any, embedding_width: int = 1024, min_length: int | None = 1,
                   pad_token: int = PAD_ID, embedding_key: str = JINA_SLOT,
                   source: str = "the Jina CLIP text encoder") -> JinaTokenizer:
    """The tokenizer from ComfyUI's `tokenizer_data` (`{"spiece_model": tensor, bytes or path}`)."""
    from comfy_core.text_encoders.errors import VocabularyError

    spiece = (tokenizer_data or {}).get(SPIECE_KEY)
    if spiece is None:
        raise VocabularyError(f"{source}: this Jina CLIP v2 file has no tokenizer (no {SPIECE_KEY!r} tensor); "
                              "use ComfyUI's repackaged jina_clip_v2_bf16.safetensors, which carries it, or give "
                              f"its SentencePiece model as tokenizer_data={{{SPIECE_KEY!r}: ...}}")
    return JinaTokenizer(embedding_key, embedding_width, min_length, pad_token=pad_token,
                         backend=GemmaSentencePiece.from_data(spiece, f"{source}: {SPIECE_KEY}"))


__all__ = ["JINA_SLOT", "JINA_SPIECE_KEY", "JinaClip2TextModel", "JinaConfig", "JinaDetectionError", "JinaKeyError", "JinaTokenizer",
           "XLMRobertaModel", "build_jina_encoder", "jina_state_dict", "jina_token_mask", "jina_tokenizer",
           "rope_tables", "run_jina"]
