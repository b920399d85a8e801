"""The Qwen3 text tower (Qwen Team 2025, "Qwen3 Technical Report"): Z-Image's Qwen3-4B encoder,
as ComfyUI's `comfy/text_encoders/llama.py` (`Qwen3_4BConfig`, `Llama2_`) and `z_image.py`
(`Qwen3_4BModel`) run it.

Weights: transformers' `Qwen3Model` modules (`embed_tokens`, `layers.N.self_attn.{q,k,v,o}_proj`,
`layers.N.self_attn.{q,k}_norm`, `layers.N.mlp.{gate,up,down}_proj`, `layers.N.input_layernorm`,
`layers.N.post_attention_layernorm`, `norm`) held as `transformer.model`, so the parameter names are
ComfyUI's (`qwen3_4b.transformer.model.layers.0...` in the set). Files: ComfyUI's
`qwen_3_4b.safetensors` and the Hugging Face checkpoint are the same layout, `model.*` (an
`lm_head.weight` is ignored: an encoder never reads it); in single files the tower sits under
`text_encoders.qwen3_4b.transformer.`. Built on transformers' classes (the pinned major version)
for the modules and names only; the forward pass is ours, so that every layer computes in float32
whatever the weights are stored in (bf16, fp16, fp8: one layer's weights cast at a time,
`compute_in_float32`, ComfyUI's `manual_cast`) and attention goes through the backend in force.

The block (pre-norm decoder, causal): RMSNorm; q/k/v projections without bias; per-head RMSNorm of
q and k (Qwen3's QK-norm), then rotary position embedding (Su et al. 2021, "RoFormer", the
rotate-half form, theta 1e6) on q and k; grouped-query attention (k/v heads shared by
`heads // kv_heads` query heads); output projection; RMSNorm; SwiGLU feed-forward
`down(silu(gate(x)) * up(x))`. The attention mask is ComfyUI's: causal (`finfo.min / 4` above the
diagonal), plus `finfo.min / 4` on the keys the token mask excludes.

`Qwen3TextEncoder` is ComfyUI's `SDClipModel` as `Qwen3_4BModel` sets it up: layer "hidden", index
-2 (the state after the next-to-last block), no final norm on it (`layer_norm_hidden_state=False`),
special tokens `{"pad": 151643}` (no start, no end), attention masks used and returned
(`enable_attention_masks`, `return_attention_masks`); the token mask is 1 up to the first pad
token, which and everything after it is 0 (a row that starts with pads is left-padded: those are
0 until the first other token). No pooled output. Prompt weights interpolate from an all-pad
"empty" row, as `ClipTokenWeightEncoder` does (Z-Image's tokenizer disables weights anyway).

Generation (ComfyUI's `BaseQwen3` / `BaseGenerate`, driven by `generate.generate_tokens`): the
same blocks with a key/value cache (`decode_step`: positions continue from the cache, causal over
every cached key, no token mask, as ComfyUI's generate passes none), the final norm, and the LM
head: the file's `lm_head.weight` when it has one (Qwen3-8B), else the token table (Qwen3-4B ties
them). Stop tokens are Qwen3's `<|endoftext|>` 151643 and `<|im_end|>` 151645.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.models.float32_compute import compute_in_float32
from comfy_core.text_encoders.decoder_llm import apply_rotary  # noqa: F401  (re-exported)
from comfy_core.text_encoders.decoder_llm import (FP8_DTYPES, DecoderShape, apply_overrides, attention_bias,
                                                  attention_block_shapes, block_count, check_block_shapes,
                                                  convert_weights, embed_tokens, load_decoder, prenorm_block,
                                                  rotary_tables, run_to_layer, shape_of)
from comfy_core.text_encoders.errors import TextEncoderDetectionError, TextEncoderKeyError, TokenizeError
from comfy_core.text_encoders.generate import GenerationError, KVCache
from comfy_core.text_encoders.qwen_tokenizer import PAD_ID
from comfy_core.text_encoders.token_chunks import EmbeddingOverride, chunks_to_ids
from comfy_core.text_encoders.tower_options import TowerOptions
from comfy_core.text_encoders.weighting import interpolate_from_empty

# ComfyUI's `stop_tokens` of its Qwen3 configs: <|endoftext|>, <|im_end|>.
STOP_TOKENS = (151643, 151645)
MARKER = "model.layers.0.self_attn.q_norm.weight"  # Qwen3 (QK-norm); Qwen2.5 and Llama have none
GEMMA_MARKER = "model.layers.0.post_feedforward_layernorm.weight"  # Gemma 2 / 3 (ComfyUI tests it first)
QWEN3_4B_SLOT = "qwen3_4b"
# ComfyUI's names of the Qwen3 towers by width (`comfy/sd.py: detect_te_model`); any other width
# (a reduced test model) is named as the 4B, the encoder Z-Image uses.
SLOTS_BY_WIDTH = {1024: "qwen3_06b", 2048: "qwen3_2b", 2560: QWEN3_4B_SLOT, 4096: "qwen3_8b"}
# Qwen3-Embedding-0.6B's table (ACE-Step 1.5's text encoder, `qwen_0.6b_ace15`): a reduced-width
# tower with exactly these rows is named as the 0.6B, so it and ACE-Step's LM can load together.
EMBEDDING_06B_VOCAB = 151_669
LOGIT_ROWS = 16384  # LM-head rows cast to float32 at a time when generating


class Qwen3DetectionError(TextEncoderDetectionError, ValueError):
    """A Qwen3 tower's tensors are incomplete or inconsistent (names the key at fault)."""


class Qwen3KeyError(TextEncoderKeyError, ValueError):
    """A Qwen3 state-dict key is missing, unknown, unsupported or of the wrong shape."""


@dataclass(frozen=True)
class Qwen3Config(DecoderShape):
    """One Qwen3 decoder used as a text encoder: where its keys are and how it is shaped. What
    shapes cannot show is Qwen3's published configuration (RMS epsilon 1e-6, rope theta 1e6)."""

    prefix: str  # the part before `model.` ("" for text-encoder files)
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    dtype: str = "F32"  # storage dtype of the file's weights (safetensors name), from the final norm
    slot: str = QWEN3_4B_SLOT

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "Qwen3Config | None":
        """The config of the Qwen3 tower under `prefix`, or None when there is none.

        `tensors`: name -> object with `.shape` (and optionally `.dtype`): a safetensors header
        or a state dict, never tensor data. Raises `Qwen3DetectionError` for incomplete or
        inconsistent towers.
        """
        if prefix + MARKER not in tensors or prefix + GEMMA_MARKER in tensors:
            return None  # no QK-norm, or Gemma 3's (QK-norm with sandwich norms around the MLP)
        model = prefix + "model."
        vocab, hidden = _shape(tensors, model + "embed_tokens.weight", 2)
        _expect(model + "norm.weight", _shape(tensors, model + "norm.weight", 1), (hidden,))
        attn = model + "layers.0.self_attn."
        (head_dim,) = _shape(tensors, attn + "q_norm.weight", 1)
        q_out, _ = _shape(tensors, attn + "q_proj.weight", 2)
        k_out, _ = _shape(tensors, attn + "k_proj.weight", 2)
        if q_out % head_dim or k_out % head_dim:
            raise Qwen3DetectionError(f"{attn}q_proj / k_proj: {q_out} / {k_out} outputs do not split into "
                                      f"heads of {head_dim} (q_norm's width)")
        heads, kv_heads = q_out // head_dim, k_out // head_dim
        if heads % kv_heads:
            raise Qwen3DetectionError(f"{attn}: {heads} query heads do not share {kv_heads} key/value heads evenly")
        intermediate, _ = _shape(tensors, model + "layers.0.mlp.gate_proj.weight", 2)
        layers = block_count(tensors, prefix, Qwen3DetectionError)
        config = cls(prefix=prefix, hidden_size=hidden, intermediate_size=intermediate, num_layers=layers,
                     num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, vocab_size=vocab,
                     dtype=str(getattr(tensors[model + "norm.weight"], "dtype", "F32")),
                     slot=SLOTS_BY_WIDTH.get(hidden, "qwen3_06b" if vocab == EMBEDDING_06B_VOCAB else QWEN3_4B_SLOT))
        check_block_shapes(tensors, model, config, Qwen3DetectionError, "Qwen3")
        if model + "layers.0.self_attn.q_proj.bias" in tensors:
            raise Qwen3DetectionError(f"{attn}q_proj.bias: Qwen3 projections have no bias (a Qwen2-style model?)")
        return config

    def block_shapes(self, index: int) -> dict[str, tuple[int, ...]]:
        """Name (relative to `model.`) -> shape of every weight of block `index`."""
        base = f"layers.{index}."
        return {base + "input_layernorm.weight": (self.hidden_size,), **attention_block_shapes(self, index),
                base + "self_attn.q_norm.weight": (self.head_dim,), base + "self_attn.k_norm.weight": (self.head_dim,),
                base + "post_attention_layernorm.weight": (self.hidden_size,)}

    def to_transformers(self) -> Any:
        """transformers' `Qwen3Config` for a model of this shape."""
        from transformers import Qwen3Config as HFQwen3Config

        config = HFQwen3Config(
            **self.transformers_shape(), attention_bias=False, tie_word_embeddings=True, max_position_embeddings=40960)
        config._attn_implementation = "sdpa"
        return config


def _shape(tensors: Mapping[str, Any], key: str, ndim: int) -> tuple[int, ...]:
    return shape_of(tensors, key, ndim, Qwen3DetectionError, "Qwen3")


def _expect(key: str, shape: tuple[int, ...], expected: tuple[int, ...]) -> None:
    if shape != expected:
        raise Qwen3DetectionError(f"Qwen3 key {key!r}: expected shape {expected}, got {shape}")


@dataclass(frozen=True)
class Qwen3Options:
    """How the tower runs when no encoder set gave it options (ComfyUI's `Qwen3_4BModel`
    defaults). An encoder set's `EncoderOptions` for the slot works the same (read: pad_token,
    layer_idx, layer_norm_hidden)."""

    slot: str = QWEN3_4B_SLOT
    token_key: str = QWEN3_4B_SLOT
    pad_token: int = PAD_ID
    layer_idx: int | None = -2  # the state after the next-to-last block
    layer_norm_hidden: bool = False
    projected_pooled: bool = False


def token_mask(rows: Sequence[Sequence[Any]], pad_token: int) -> torch.Tensor:
    """[B, T] ComfyUI's `SDClipModel.process_tokens` mask for a tower without an end token: 1 up
    to the first pad token, 0 from it on; leading pads (left padding) are 0 and do not end the
    row; embedding vectors count 1 wherever they are."""
    masks = []
    for row in rows:
        mask, ended, left_pad = [], False, False
        for index, token in enumerate(row):
            if isinstance(token, torch.Tensor):
                mask.append(1)
                continue
            token = int(token)
            if index == 0 and token == pad_token:
                left_pad = True
            if ended or (left_pad and token == pad_token):
                mask.append(0)
            else:
                mask.append(1)
                left_pad = False
            if not ended and token == pad_token and not left_pad:
                mask[-1] = 0
                ended = True
        masks.append(mask)
    return torch.tensor(masks, dtype=torch.long)


class Qwen3Transformer(nn.Module):
    """ComfyUI's `Qwen3_4B` (`llama.py`): the decoder as `model`, `get_input_embeddings()`."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    @property
    def num_layers(self) -> int:
        return len(self.model.layers)

    def get_input_embeddings(self) -> nn.Module:
        return self.model.embed_tokens

    def set_input_embeddings(self, embeddings: nn.Module) -> None:
        self.model.embed_tokens = embeddings

    def output_weight(self) -> torch.Tensor:
        """[vocab, width] the LM head's weight: the file's untied `lm_head` (a non-persistent
        buffer, so encoding state dicts are unchanged), else the token table (tied)."""
        head = getattr(self, "lm_head_weight", None)
        return self.get_input_embeddings().weight if head is None else head


class Qwen3TextEncoder(TowerOptions, nn.Module):
    """One Qwen3 tower, ComfyUI's `Qwen3_4BModel` surface (an `SDClipModel`) for our
    `TextEncoderSet` (see the module doc)."""

    options: Any = None  # the set's EncoderOptions for this slot, else Qwen3Options()
    zero_out_masked = False

    def __init__(self, config: Qwen3Config, transformer: Qwen3Transformer) -> None:
        super().__init__()
        self.config = config
        self.transformer = transformer
        self.enable_attention_masks = True
        self.return_attention_masks = True
        self.options = self.default_options = Qwen3Options(slot=config.slot, token_key=config.slot)

    # --- ComfyUI's SDClipModel surface ---

    @property
    def special_tokens(self) -> dict[str, int]:
        return {"pad": int(getattr(self.options, "pad_token", PAD_ID))}

    @property
    def num_layers(self) -> int:
        return self.transformer.num_layers

    @property
    def width(self) -> int:
        return self.config.hidden_size

    @property
    def dtype(self) -> torch.dtype:
        """Storage dtype of the weights (computation is float32)."""
        return self.token_embedding().weight.dtype

    @property
    def layer_idx(self) -> int | None:
        return self.options.layer_idx

    @property
    def layer(self) -> str:
        return "last" if self.layer_idx is None else "hidden"

    def set_clip_options(self, options: Mapping[str, Any]) -> None:
        """ComfyUI's `set_clip_options`: `{"layer": n}` selects block n's output (None, or beyond
        the depth: the final normed output). Lasts until `reset_clip_options`."""
        if "layer" in options:
            layer = options["layer"]
            layer_idx = None if layer is None or abs(layer) > self.num_layers else int(layer)
            self.options = replace(self.options, layer_idx=layer_idx)

    def token_embedding(self) -> nn.Module:
        """ComfyUI's `transformer.get_input_embeddings()` (a pack may have wrapped it)."""
        return self.transformer.get_input_embeddings()

    def load_sd(self, sd: Mapping[str, torch.Tensor]) -> Any:
        """ComfyUI's `load_sd`: copy `sd` (transformer-relative names, `model.layers...`) in, non-strict."""
        return self.transformer.load_state_dict(sd, strict=False)

    def forward(self, tokens: Any) -> tuple:
        """ComfyUI's `SDClipModel.forward(tokens)`: token rows (an id tensor [B, T], or lists of ids
        and embedding vectors) -> (states [B, T, W] float32, None, {"attention_mask": [B, T]})."""
        rows = tokens.tolist() if isinstance(tokens, torch.Tensor) else [list(row) for row in tokens]
        pad = self.special_tokens["pad"]
        ids, overrides = chunks_to_ids(rows, self.width, mismatch_pad=pad)
        mask = token_mask(rows, pad)
        if mask.shape != ids.shape:  # an embedding of another width was dropped: its pad is masked
            mask = torch.cat([mask, torch.zeros(mask.shape[0], ids.shape[1] - mask.shape[1], dtype=mask.dtype)], 1)
        hidden = self.encode_ids(ids, overrides, layer_idx=self.options.layer_idx,
                                 layer_norm_hidden=self.options.layer_norm_hidden,
                                 attention_mask=mask if self.enable_attention_masks else None)
        if self.zero_out_masked:
            hidden = hidden * mask.to(device=hidden.device, dtype=hidden.dtype).unsqueeze(-1)
        if self.return_attention_masks:
            return hidden, None, {"attention_mask": mask.to(hidden.device)}
        return hidden, None

    def encode(self, tokens: Any) -> tuple:
        return self(tokens)

    def empty_tokens(self, length: int) -> list[int]:
        """ComfyUI's `gen_empty_tokens` without start and end tokens: `length` pad tokens."""
        return [self.special_tokens["pad"]] * length

    def encode_token_weights(self, token_weight_pairs: Sequence[Sequence[Any]]) -> tuple:
        """ComfyUI's `ClipTokenWeightEncoder.encode_token_weights`: (token, weight) chunks ->
        (cond [1, n*T, W] float32, None, {"attention_mask": [1, n*T]}). With weights other than 1,
        an empty row (pads up to the longest chunk) is encoded in the same batch and each
        weighted token becomes `z_empty + (z - z_empty) * w`."""
        rows = [[pair[0] for pair in chunk] for chunk in token_weight_pairs]
        weights = [[float(pair[1]) for pair in chunk] for chunk in token_weight_pairs]
        has_weights = any(w != 1.0 for row in weights for w in row)
        sections = len(rows)
        to_encode = list(rows)
        if has_weights or sections == 0:
            to_encode.append(self.empty_tokens(max((len(r) for r in rows), default=0)))
        with torch.no_grad():
            out = self(to_encode)
        hidden = out[0]  # [N, T, W]
        if sections == 0:
            cond = hidden[-1:]
        else:
            parts = []
            for index in range(sections):
                z = hidden[index]
                if has_weights:
                    z = interpolate_from_empty(z, hidden[-1], torch.tensor(weights[index], device=z.device))
                parts.append(z[None])
            cond = torch.cat(parts, dim=-2)
        if len(out) > 2:
            return cond, None, {"attention_mask": out[2]["attention_mask"][:sections].flatten().unsqueeze(0)}
        return cond, None

    # --- the forward pass ---

    def encode_ids(self, ids: torch.Tensor, overrides: Sequence[EmbeddingOverride] = (),
                   layer_idx: int | None = -2, layer_norm_hidden: bool = False,
                   attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """ids [B, T] -> the selected states [B, T, W] float32.

        `layer_idx`: None for the final normed output, else block `layer_idx`'s output (negative
        counts from the end), through the final norm when `layer_norm_hidden`. The blocks after
        the chosen one are not run (their output is not used). `attention_mask` [B, T] (1 attend)
        masks keys besides the causal mask.
        """
        x, cos, sin, bias = self._prepare(ids, overrides, attention_mask, "qwen3")
        return run_to_layer(self, x, cos, sin, bias, layer_idx, layer_norm_hidden)

    def _prepare(self, ids: torch.Tensor, overrides: Sequence[EmbeddingOverride], attention_mask: torch.Tensor | None,
                 tower: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """ids [B, T] -> the input embeddings [B, T, W] (with `overrides`), the RoPE tables [T, d]
        and the attention bias [B or 1, 1, T, T]; `tower` names this tower in errors."""
        if ids.dim() != 2:
            raise TokenizeError(f"{tower}: token ids must be [batch, tokens], got shape {tuple(ids.shape)}")
        x = self.embed_ids(ids)  # [B, T, W]
        if overrides:
            x = _apply_overrides(x, overrides)
        length = ids.shape[1]
        cos, sin = rotary_tables(length, self.config.head_dim, self.config.rope_theta, x.device)  # [T, d]
        return x, cos, sin, attention_bias(attention_mask, length, x.device)

    # --- generation (see the module doc and generate.py) ---

    can_generate = True
    stop_tokens = STOP_TOKENS

    def new_cache(self, batch: int, capacity: int) -> KVCache:
        """An empty key/value cache for `capacity` positions, float32 on the weights' device."""
        config = self.config
        return KVCache(config.num_layers, batch, capacity, config.num_kv_heads, config.head_dim,
                       self.token_embedding().weight.device)

    def embed_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [B, T] -> input embeddings [B, T, W] float32."""
        return embed_tokens(self.token_embedding(), ids, self.config.vocab_size, "qwen3", skip_empty=False)

    def prompt_embeds(self, row: Sequence[Any]) -> torch.Tensor:
        """One token row (ids and embedding vectors, as the tokenizer gives) -> [1, T, W] float32."""
        ids, overrides = chunks_to_ids([list(row)], self.width, mismatch_pad=self.special_tokens["pad"])
        x = self.embed_ids(ids)
        return _apply_overrides(x, overrides) if overrides else x

    def decode_step(self, embeds: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Run embeds [B, T, W] at positions `cache.length ..` through every block (their keys and
        values join the cache) -> the last position's final normed state [B, W] float32."""
        start, length = cache.length, embeds.shape[1]
        total = start + length
        cos, sin = rotary_tables(total, self.config.head_dim, self.config.rope_theta, embeds.device)
        cos, sin = cos[start:], sin[start:]  # [T, d]: the rows of the new positions
        low = torch.finfo(torch.float32).min / 4
        # Query i (position start + i) sees keys 0 .. start + i: [1, 1, T, start + T].
        bias = torch.full((length, total), low, dtype=torch.float32, device=embeds.device).triu_(start + 1)[None, None]
        x = embeds.float()
        for index, block in enumerate(self.transformer.model.layers):
            x = self._block(block, x, cos, sin, bias, cache, index)
        cache.advance(length)
        return compute_in_float32(self.transformer.model.norm, x[:, -1]).float()

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [B, W] -> next-token logits [B, vocab] float32. A head stored in another dtype is
        cast to float32 `LOGIT_ROWS` vocabulary rows at a time (a whole Qwen3 table would be 1.5 GB)."""
        weight = self.transformer.output_weight()
        expected = (self.config.vocab_size, self.config.hidden_size)
        if tuple(weight.shape) != expected:
            raise GenerationError(f"qwen3: the LM head has shape {tuple(weight.shape)}, expected {expected}")
        hidden = hidden.float()
        if weight.dtype == torch.float32:
            return F.linear(hidden, weight.to(hidden.device))
        scale = getattr(self.transformer, "lm_head_scale", None)
        parts = []
        for start in range(0, weight.shape[0], LOGIT_ROWS):
            rows = weight[start:start + LOGIT_ROWS].to(device=hidden.device, dtype=torch.float32)
            rows = torch.nan_to_num(rows) if weight.dtype in FP8_DTYPES else rows
            parts.append(F.linear(hidden, rows if scale is None else rows * scale.to(rows.device)))
        return torch.cat(parts, dim=-1)

    def _block(self, block: nn.Module, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               bias: torch.Tensor, cache: KVCache | None = None, layer: int = 0) -> torch.Tensor:
        """One Qwen3 decoder block (see the module doc); with a cache, this step's keys and values
        join block `layer`'s entries and the queries attend over all of them."""
        return prenorm_block(block, x, cos, sin, bias, self.config, qk_norm=True, cache=cache, layer=layer)


def _apply_overrides(embeds: torch.Tensor, overrides: Sequence[EmbeddingOverride]) -> torch.Tensor:
    """Input embeddings [B, T, W] with the given positions replaced by embedding vectors."""
    return apply_overrides(embeds, overrides, "qwen3")


# Keys a Qwen3 file may hold that the encoder does not read: the language-model head (Qwen3-8B
# has an untied one; `build_qwen3_encoder` keeps it aside for generation), ComfyUI's SDClipModel
# `logit_scale`.
_IGNORED_KEYS = ("lm_head.weight", "logit_scale")


def qwen3_state_dict(config: Qwen3Config, state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The file's tensors under `config.prefix` -> `Qwen3Model` names (without `model.`), with
    ComfyUI's scaled-fp8 / float8 scales as `scales` (`decoder_llm.convert_weights`). Unknown keys
    under the prefix (other quantisation formats included) are a `Qwen3KeyError`, never dropped."""
    return convert_weights(config.prefix, state_dict, _IGNORED_KEYS, Qwen3KeyError, "Qwen3", "Qwen3")


def build_qwen3_encoder(config: Qwen3Config, state_dict: Mapping[str, torch.Tensor],
                        dtype: torch.dtype | None = None) -> Qwen3TextEncoder:
    """Build on the meta device, then load the file's tensors with `assign=True`.

    `dtype`: the storage dtype (computation is float32 anyway); None keeps each tensor as the file
    stores it, as ComfyUI keeps its LLM encoders in the file's dtype (`dtype_llama`). Tensors
    already in `dtype` are used as they are (mmap views stay views).
    """
    from transformers import Qwen3Model

    converted = qwen3_state_dict(config, state_dict)
    model = load_decoder(Qwen3Model, config, converted, dtype, Qwen3KeyError, "Qwen3")
    transformer = Qwen3Transformer(model)
    head = state_dict.get(config.prefix + "lm_head.weight")
    if head is not None:  # an untied head (Qwen3-8B): kept for generation only, checked when used
        keep = dtype is None or head.dtype == dtype or converted.head_scale is not None
        transformer.register_buffer("lm_head_weight", head if keep else head.to(dtype), persistent=False)
        if converted.head_scale is not None:  # a scaled-fp8 head: true rows = stored rows x scale
            transformer.register_buffer("lm_head_scale", converted.head_scale, persistent=False)
    return Qwen3TextEncoder(config, transformer)
