"""The Gemma 2 text tower (Gemma Team 2024, "Gemma 2: Improving Open Language Models at a Practical
Size"): Lumina-Image 2.0's Gemma 2 2B encoder, as ComfyUI's `comfy/text_encoders/llama.py`
(`Gemma2_2B_Config`, `TransformerBlockGemma2`, `Llama2_`) and `lumina2.py` (`Gemma2_2BModel`,
`LuminaModel`) run it.

Weights: transformers' `Gemma2Model` modules (`embed_tokens`, `layers.N.self_attn.{q,k,v,o}_proj`,
`layers.N.mlp.{gate,up,down}_proj`, the four norms `layers.N.{input,post_attention,pre_feedforward,
post_feedforward}_layernorm`, `norm`) held as `transformer.model`, so the parameter names are
ComfyUI's (`gemma2_2b.transformer.model.layers.0...` in the set). Files: ComfyUI's
`gemma_2_2b_fp16.safetensors` and the Hugging Face checkpoint share the layout `model.*`; ComfyUI's
file also carries the tokenizer, the serialized SentencePiece model as the uint8 tensor
`spiece_model` (`gemma_tokenizer.py`), which is not a weight. Told apart from Qwen3 / Llama files
by ComfyUI's rule (`detect_te_model`): `model.layers.0.post_feedforward_layernorm.weight` means
Gemma, and without `self_attn.q_norm` (Gemma 3's) Gemma 2.

Built on transformers' classes for the modules and names only; the forward pass is ours (the
Qwen3 tower's machinery, `qwen3.py`): every layer computes in float32 whatever the weights are
stored in, and attention goes through the backend in force. What the weights cannot show is
ComfyUI's `Gemma2_2B_Config`: head width 256, RMS epsilon 1e-6, rope theta 10000.

The block (pre- and post-norm "sandwich"): h = x + N2(attn(N1(x))); out = h + N4(mlp(N3(h))), with
Gemma's RMSNorm scaling by (1 + weight); q/k/v projections without bias; rotary position embedding
(rotate-half, theta 10000, no QK norm); grouped-query attention with the usual 1/sqrt(256) scale
(Gemma 2 2B's `query_pre_attn_scalar` is 256, the head width); output projection; a GeGLU
feed-forward `down(gelu_tanh(gate(x)) * up(x))`. The input embeddings are multiplied by
sqrt(width). As in ComfyUI (and unlike transformers' Gemma2 eager path), attention logits are not
soft-capped (`attn_logit_softcapping`) and there is no sliding window (`sliding_attention` None);
the final-logit soft-cap concerns the LM head, which an encoder never runs. The attention mask is
the Qwen3 tower's (causal, plus the keys the token mask excludes).

`GemmaTextEncoder` is ComfyUI's `SDClipModel` as `Gemma2_2BModel` sets it up: layer "hidden",
index -2 (the state after the next-to-last block), no final norm on it, special tokens start 2
(`<bos>`) and pad 0 (`<pad>`), attention masks used and returned (1 up to the first pad). No
pooled output.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.models.float32_compute import compute_in_float32
from comfy_core.text_encoders.decoder_llm import (DecoderShape, apply_rotary, attention_block_shapes,
                                                  convert_weights, detect_fixed_heads, embed_tokens, grouped_attention,
                                                  load_decoder, project_qkv)
from comfy_core.text_encoders.errors import TextEncoderDetectionError, TextEncoderKeyError
from comfy_core.text_encoders.generate import GenerationError
from comfy_core.text_encoders.qwen3 import Qwen3TextEncoder, Qwen3Transformer

MARKER = "model.layers.0.post_feedforward_layernorm.weight"  # Gemma 2 / 3 (ComfyUI tests it first)
QK_NORM = "model.layers.0.self_attn.q_norm.weight"  # Gemma 3 (not this tower)
GEMMA2_2B_SLOT = "gemma2_2b"
GEMMA2_2B_WIDTH = 2304
START_ID = 2  # <bos>
PAD_ID = 0  # <pad>
HEAD_DIM = 256
# Keys a Gemma file may hold that the encoder does not read: the tokenizer ComfyUI's file carries,
# an LM head, ComfyUI's SDClipModel `logit_scale`.
_IGNORED_KEYS = ("spiece_model", "lm_head.weight", "logit_scale")


class GemmaDetectionError(TextEncoderDetectionError, ValueError):
    """A Gemma tower's tensors are incomplete or inconsistent (names the key at fault)."""


class GemmaKeyError(TextEncoderKeyError, ValueError):
    """A Gemma state-dict key is missing, unknown, unsupported or of the wrong shape."""


@dataclass(frozen=True)
class GemmaConfig(DecoderShape):
    """One Gemma 2 decoder used as a text encoder (see the module doc for what shapes cannot show)."""

    prefix: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    vocab_size: int
    head_dim: int = HEAD_DIM
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10_000.0
    dtype: str = "F32"
    slot: str = GEMMA2_2B_SLOT

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "",
                            head_dim: int = HEAD_DIM) -> "GemmaConfig | None":
        """The config of the Gemma 2 tower under `prefix`, or None when there is none (no Gemma
        there, or a Gemma 3 one). `tensors`: names -> objects with `.shape`, never tensor data.
        `head_dim`: not in the weights (256, ComfyUI's). Raises `GemmaDetectionError` for
        incomplete or inconsistent towers."""
        if prefix + MARKER not in tensors or prefix + QK_NORM in tensors:
            return None
        return detect_fixed_heads(cls, tensors, prefix, head_dim, GemmaDetectionError, "Gemma")

    def block_shapes(self, index: int) -> dict[str, tuple[int, ...]]:
        """Name (relative to `model.`) -> shape of every weight of block `index`."""
        base = f"layers.{index}."
        shapes = {base + f"{norm}_layernorm.weight": (self.hidden_size,)
                  for norm in ("input", "post_attention", "pre_feedforward", "post_feedforward")}
        shapes.update(attention_block_shapes(self, index))
        return shapes

    def to_transformers(self) -> Any:
        """transformers' `Gemma2Config` for a model of this shape, set to what ComfyUI runs: no
        attention soft-cap, no sliding window (a window longer than any prompt), query scale
        1/sqrt(head width)."""
        from transformers import Gemma2Config

        config = Gemma2Config(
            **self.transformers_shape(), attention_bias=False,
            query_pre_attn_scalar=self.head_dim, attn_logit_softcapping=None, final_logit_softcapping=None,
            sliding_window=1 << 20, hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
            max_position_embeddings=8192)
        config._attn_implementation = "eager"  # modules only (the forward pass is ours); Gemma 2 has no sdpa path
        return config


@dataclass(frozen=True)
class GemmaOptions:
    """How the tower runs when no encoder set gave it options (ComfyUI's `Gemma2_2BModel`)."""

    slot: str = GEMMA2_2B_SLOT
    token_key: str = GEMMA2_2B_SLOT
    pad_token: int = PAD_ID
    start_token: int = START_ID
    layer_idx: int | None = -2
    layer_norm_hidden: bool = False
    projected_pooled: bool = False


class GemmaTextEncoder(Qwen3TextEncoder):
    """One Gemma 2 tower, ComfyUI's `Gemma2_2BModel` surface; token handling, masks, layer choice,
    prompt weights and clip options are the Qwen3 tower's, the embedding scale and block Gemma's."""

    can_generate = False  # not offered to TextGenerate here (no key/value cache path; see `_block`)

    def __init__(self, config: GemmaConfig, transformer: Qwen3Transformer) -> None:
        super().__init__(config, transformer)  # type: ignore[arg-type]
        self.options = self.default_options = GemmaOptions(slot=config.slot, token_key=config.slot)

    @property
    def special_tokens(self) -> dict[str, int]:
        return {"start": int(getattr(self.options, "start_token", START_ID)),
                "pad": int(getattr(self.options, "pad_token", PAD_ID))}

    def empty_tokens(self, length: int) -> list[int]:
        """ComfyUI's `gen_empty_tokens` with a start token and no end token: start, then pads."""
        return ([self.special_tokens["start"]] + [self.special_tokens["pad"]] * (length - 1))[:length]

    def embed_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [B, T] -> input embeddings [B, T, W] float32, scaled by sqrt(W) (Gemma's)."""
        return embed_tokens(self.token_embedding(), ids, self.config.vocab_size, "gemma") \
            * (self.config.hidden_size ** 0.5)

    def _block(self, block: nn.Module, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               bias: torch.Tensor, cache: Any = None, layer: int = 0) -> torch.Tensor:
        """One Gemma 2 decoder block (see the module doc)."""
        if cache is not None:
            raise GenerationError("gemma: the Gemma 2 encoder does not generate text (ComfyUI's Lumina 2 "
                                  "encoder is for conditioning only here)")
        attn = block.self_attn
        q, k, v = project_qkv(attn, compute_in_float32(block.input_layernorm, x), self.config)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)  # [B, T, H|KV, d]
        out = grouped_attention(q, k, v, self.config.num_heads, bias)  # [B, T, H*d]
        x = x + compute_in_float32(block.post_attention_layernorm, compute_in_float32(attn.o_proj, out))
        normed = compute_in_float32(block.pre_feedforward_layernorm, x)
        mlp = block.mlp
        inner = F.gelu(compute_in_float32(mlp.gate_proj, normed), approximate="tanh") \
            * compute_in_float32(mlp.up_proj, normed)
        return x + compute_in_float32(block.post_feedforward_layernorm, compute_in_float32(mlp.down_proj, inner))


def gemma_state_dict(config: GemmaConfig, state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The file's tensors under `config.prefix` -> `Gemma2Model` names (without `model.`). Unknown
    keys under the prefix are a `GemmaKeyError`, never dropped; ComfyUI's scaled-fp8 / float8
    scales become `scales` (`decoder_llm.convert_weights`)."""
    return convert_weights(config.prefix, state_dict, _IGNORED_KEYS, GemmaKeyError, "Gemma", "Gemma 2")


def build_gemma_encoder(config: GemmaConfig, state_dict: Mapping[str, torch.Tensor],
                        dtype: torch.dtype | None = None) -> GemmaTextEncoder:
    """Build on the meta device, then load the file's tensors with `assign=True`. `dtype`: the
    storage dtype (computation is float32 anyway); None keeps each tensor as the file stores it
    (ComfyUI's `dtype_llama`)."""
    from transformers import Gemma2Model

    model = load_decoder(Gemma2Model, config, gemma_state_dict(config, state_dict), dtype, GemmaKeyError, "Gemma")
    return GemmaTextEncoder(config, Qwen3Transformer(model))


__all__ = ["GEMMA2_2B_SLOT", "GEMMA2_2B_WIDTH", "GemmaConfig", "GemmaDetectionError", "GemmaKeyError", "GemmaOptions",
           "GemmaTextEncoder", "PAD_ID", "START_ID", "build_gemma_encoder", "gemma_state_dict"]
