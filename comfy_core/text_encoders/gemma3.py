"""The Gemma 3 text tower (Gemma Team 2025, "Gemma 3 Technical Report", arXiv 2503.19786): LTX-2's
text encoder (Gemma 3 12B), as ComfyUI's `comfy/text_encoders/llama.py` (`Gemma3_12B_Config`,
the Gemma 3 block) and `lt.py` run it.

Weights: transformers' `Gemma3TextModel` modules (as Gemma 2's, plus the per-head query / key
norms `layers.N.self_attn.{q,k}_norm`) held as `transformer.model`. Told apart from Gemma 2 by
ComfyUI's rule: `model.layers.0.post_feedforward_layernorm.weight` means Gemma, and
`self_attn.q_norm` Gemma 3. What the weights cannot show is ComfyUI's `Gemma3_12B_Config`: head
width 256 (the query scale 1/sqrt(256)), RMS epsilon 1e-6, five sliding-window (1024) blocks then
one global block, RoPE theta 10 000 on the sliding blocks and 1 000 000 with linear position
scaling 8 on the global ones.

Built on transformers' classes for the modules and names only; the forward pass is ours (the
Gemma 2 tower's sandwich block, `gemma.py`) with what Gemma 3 changes:

- q and k are RMS-normed per head (Gemma's `(1 + weight)` scaling) before RoPE;
- a sliding block attends to the keys less than `sliding_window` positions back (and causally),
  a global block to every earlier key; both also skip the keys the token mask excludes;
- each block type has its own RoPE table (theta, linear scale: positions divided by the factor).

`hidden_states(ids, mask)` returns what LTX-2's feature extractor reads: the input embeddings,
then every block's output, the last one through the final norm (transformers'
`output_hidden_states`; `num_layers + 1` states). The tower also generates text (ComfyUI's
TextGenerate on LTX-2's text encoder): a key / value cache per block, logits from the tied token
table, stopping at ComfyUI's stop tokens (`<eos>`, `<end_of_turn>`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.models.float32_compute import compute_in_float32
from comfy_core.text_encoders.decoder_llm import (apply_rotary, convert_weights, detect_fixed_heads,
                                                  grouped_attention, load_decoder, project_qkv)
from comfy_core.text_encoders.encoder import resolve_layer
from comfy_core.text_encoders.gemma import (MARKER, QK_NORM, GemmaConfig, GemmaDetectionError, GemmaKeyError,
                                            GemmaOptions, GemmaTextEncoder)
from comfy_core.text_encoders.qwen3 import Qwen3Transformer
from comfy_core.text_encoders.errors import TokenizeError

GEMMA3_12B_SLOT = "gemma3_12b"
GEMMA3_12B_WIDTH = 3840
SLIDING, FULL = "sliding_attention", "full_attention"
_IGNORED_KEYS = ("spiece_model", "lm_head.weight", "logit_scale")


@dataclass(frozen=True)
class Gemma3Config(GemmaConfig):
    """One Gemma 3 decoder used as a text encoder (see the module doc for what shapes cannot show)."""

    rope_theta: float = 1_000_000.0  # the global blocks'
    rope_scale: float = 8.0  # the global blocks' linear position scaling
    rope_local_theta: float = 10_000.0
    sliding_window: int = 1024
    sliding_pattern: int = 6  # every sixth block is global
    query_pre_attn_scalar: int = 256
    slot: str = GEMMA3_12B_SLOT

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "",
                            head_dim: int = 256) -> "Gemma3Config | None":
        """The config of the Gemma 3 tower under `prefix`, or None when there is none there.
        Raises `GemmaDetectionError` for incomplete or inconsistent towers (q/k norms included)."""
        if prefix + MARKER not in tensors or prefix + QK_NORM not in tensors:
            return None
        return detect_fixed_heads(cls, tensors, prefix, head_dim, GemmaDetectionError, "Gemma 3")

    def layer_type(self, index: int) -> str:
        return FULL if (index + 1) % self.sliding_pattern == 0 else SLIDING

    def block_shapes(self, index: int) -> dict[str, tuple[int, ...]]:
        shapes = super().block_shapes(index)
        base = f"layers.{index}.self_attn."
        shapes[base + "q_norm.weight"] = (self.head_dim,)
        shapes[base + "k_norm.weight"] = (self.head_dim,)
        return shapes

    def to_transformers(self) -> Any:
        """transformers' `Gemma3TextConfig` of this shape and ComfyUI's settings."""
        from transformers import Gemma3TextConfig

        shape = self.transformers_shape()
        shape.pop("rope_parameters")
        config = Gemma3TextConfig(
            **shape, attention_bias=False, query_pre_attn_scalar=self.query_pre_attn_scalar,
            sliding_window=self.sliding_window, layer_types=[self.layer_type(i) for i in range(self.num_layers)],
            rope_parameters={FULL: {"rope_type": "linear", "factor": self.rope_scale, "rope_theta": self.rope_theta}
                             if self.rope_scale != 1.0 else {"rope_type": "default", "rope_theta": self.rope_theta},
                             SLIDING: {"rope_type": "default", "rope_theta": self.rope_local_theta}},
            hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True, max_position_embeddings=131072,
            attn_logit_softcapping=None, final_logit_softcapping=None)
        config._attn_implementation = "eager"
        return config


def rope_tables(length: int, head_dim: int, theta: float, scale: float,
                device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin `[T, head_dim]` of the rotate-half RoPE at positions `0..T-1` divided by `scale`."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    freqs = torch.arange(length, device=device, dtype=torch.float32)[:, None] * (inv_freq / scale)[None, :]
    angles = torch.cat((freqs, freqs), dim=-1)
    return angles.cos(), angles.sin()


def attention_biases(mask: torch.Tensor | None, length: int, window: int,
                     device: torch.device) -> dict[str, torch.Tensor]:
    """Additive float32 biases `[B or 1, 1, T, T]` per block type (causal; sliding: keys less than
    `window` back); the keys the token mask excludes get the same large negative value."""
    low = torch.finfo(torch.float32).min / 4
    query = torch.arange(length, device=device)[:, None]
    key = torch.arange(length, device=device)[None, :]
    causal = key > query
    far = key <= query - window
    out = {}
    for name, blocked in ((FULL, causal), (SLIDING, causal | far)):
        bias = torch.zeros((length, length), dtype=torch.float32, device=device).masked_fill(blocked, low)[None, None]
        if mask is not None:
            excluded = (mask.to(device) == 0)[:, None, None, :]
            bias = bias + torch.zeros(excluded.shape, dtype=torch.float32, device=device).masked_fill(excluded, low)
        out[name] = bias
    return out


STOP_TOKENS = (1, 106)  # ComfyUI's Gemma3_12B_Config.stop_tokens: <eos>, <end_of_turn>


class Gemma3TextEncoder(GemmaTextEncoder):
    """One Gemma 3 tower (see the module doc); token handling, masks and options are the Gemma 2
    tower's, the block, masks and RoPE tables Gemma 3's.

    It generates (TextGenerate, TextGenerateLTX2Prompt): `decode_step` runs new positions with a
    key / value cache, each block type with its own RoPE table and mask (a sliding block sees the
    keys less than `sliding_window` positions back), the logits from the tied token table."""

    can_generate = True
    stop_tokens = STOP_TOKENS

    def __init__(self, config: Gemma3Config, transformer: Qwen3Transformer) -> None:
        super().__init__(config, transformer)  # type: ignore[arg-type]
        self.options = self.default_options = GemmaOptions(slot=config.slot, token_key=config.slot)

    def _tables(self, ids: torch.Tensor, attention_mask: torch.Tensor | None) -> tuple[torch.Tensor, dict, dict]:
        if ids.dim() != 2:
            raise TokenizeError(f"gemma3: token ids must be [batch, tokens], got shape {tuple(ids.shape)}")
        config: Any = self.config
        x = self.embed_ids(ids)
        length, device = ids.shape[1], x.device
        ropes = {FULL: rope_tables(length, config.head_dim, config.rope_theta, config.rope_scale, device),
                 SLIDING: rope_tables(length, config.head_dim, config.rope_local_theta, 1.0, device)}
        return x, ropes, attention_biases(attention_mask, length, config.sliding_window, device)

    def encode_ids(self, ids: torch.Tensor, overrides: Any = (), layer_idx: int | None = -2,
                   layer_norm_hidden: bool = False, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """ids [B, T] -> block `layer_idx`'s output (None: the final normed output) [B, T, W] float32."""
        if overrides:
            raise TokenizeError("gemma3: embedding overrides are not supported by the Gemma 3 tower")
        x, ropes, biases = self._tables(ids, attention_mask)
        model = self.transformer.model
        target = resolve_layer(layer_idx, self.num_layers)
        for index, block in enumerate(model.layers):
            kind = self.config.layer_type(index)  # type: ignore[attr-defined]
            x = self._block(block, x, *ropes[kind], biases[kind])
            if index == target:
                return (compute_in_float32(model.norm, x) if layer_norm_hidden else x).float()
        return compute_in_float32(model.norm, x).float()

    def hidden_states(self, ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> list[torch.Tensor]:
        """The input embeddings and every block's output, the last through the final norm
        (`num_layers + 1` tensors `[B, T, W]` float32)."""
        x, ropes, biases = self._tables(ids, attention_mask)
        model = self.transformer.model
        states = [x]
        for index, block in enumerate(model.layers):
            kind = self.config.layer_type(index)  # type: ignore[attr-defined]
            x = self._block(block, x, *ropes[kind], biases[kind])
            states.append(x)
        states[-1] = compute_in_float32(model.norm, x).float()
        return states

    def decode_step(self, embeds: torch.Tensor, cache: Any) -> torch.Tensor:
        """Run embeds [B, T, W] at positions `cache.length ..` through every block (their keys and
        values join the cache) -> the last position's final normed state [B, W] float32."""
        config: Any = self.config
        start, length = cache.length, embeds.shape[1]
        total, device = start + length, embeds.device
        ropes = {FULL: rope_tables(total, config.head_dim, config.rope_theta, config.rope_scale, device),
                 SLIDING: rope_tables(total, config.head_dim, config.rope_local_theta, 1.0, device)}
        ropes = {kind: (cos[start:], sin[start:]) for kind, (cos, sin) in ropes.items()}  # the new positions' rows
        low = torch.finfo(torch.float32).min / 4
        query = torch.arange(start, total, device=device)[:, None]
        key = torch.arange(total, device=device)[None, :]
        causal = key > query
        biases = {FULL: torch.zeros((length, total), device=device).masked_fill(causal, low)[None, None],
                  SLIDING: torch.zeros((length, total), device=device).masked_fill(
                      causal | (key <= query - config.sliding_window), low)[None, None]}
        x = embeds.float()
        for index, block in enumerate(self.transformer.model.layers):
            kind = config.layer_type(index)
            x = self._block(block, x, *ropes[kind], biases[kind], cache, index)
        cache.advance(length)
        return compute_in_float32(self.transformer.model.norm, x[:, -1]).float()

    def _block(self, block: nn.Module, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               bias: torch.Tensor, cache: Any = None, layer: int = 0) -> torch.Tensor:
        """One Gemma 3 decoder block (see the module doc); with a cache, this step's keys and
        values join block `layer`'s entries and the queries attend over all of them."""
        config: Any = self.config
        attn = block.self_attn
        q, k, v = project_qkv(attn, compute_in_float32(block.input_layernorm, x), config)
        q, k = compute_in_float32(attn.q_norm, q), compute_in_float32(attn.k_norm, k)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)  # [B, T, H|KV, d]
        if cache is not None:
            k, v = cache.update(layer, k, v)  # [B, S, KV, d]: every position so far
        q = q * (config.head_dim ** 0.5 / config.query_pre_attn_scalar ** 0.5)  # the backend scales by 1/sqrt(d)
        out = grouped_attention(q, k, v, config.num_heads, bias)
        x = x + compute_in_float32(block.post_attention_layernorm, compute_in_float32(attn.o_proj, out))
        normed = compute_in_float32(block.pre_feedforward_layernorm, x)
        mlp = block.mlp
        inner = F.gelu(compute_in_float32(mlp.gate_proj, normed), approximate="tanh") \
            * compute_in_float32(mlp.up_proj, normed)
        return x + compute_in_float32(block.post_feedforward_layernorm, compute_in_float32(mlp.down_proj, inner))


def gemma3_state_dict(config: Gemma3Config, state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The file's tensors under `config.prefix` -> `Gemma3TextModel` names (without `model.`);
    unknown keys under the prefix are a `GemmaKeyError`."""
    return convert_weights(config.prefix, state_dict, _IGNORED_KEYS, GemmaKeyError, "Gemma", "Gemma 3")


def build_gemma3_encoder(config: Gemma3Config, state_dict: Mapping[str, torch.Tensor],
                         dtype: torch.dtype | None = None) -> Gemma3TextEncoder:
    """Build on the meta device, then load the file's tensors (`dtype`: storage dtype, None as stored)."""
    from transformers import Gemma3TextModel

    model = load_decoder(Gemma3TextModel, config, gemma3_state_dict(config, state_dict), dtype, GemmaKeyError,
                         "Gemma 3")
    return Gemma3TextEncoder(config, Qwen3Transformer(model))


__all__ = ["GEMMA3_12B_SLOT", "GEMMA3_12B_WIDTH", "Gemma3Config", "Gemma3TextEncoder", "attention_biases",
           "build_gemma3_encoder", "gemma3_state_dict", "rope_tables"]
