"""The Llama 3 text tower (Meta 2024, "The Llama 3 Herd of Models"): HiDream's Llama 3.1 8B Instruct
encoder, as ComfyUI's `comfy/text_encoders/llama.py` (`Llama2Config`, `Llama2_`),
`hunyuan_video.py` (`LLAMAModel`) and `hidream.py` (`HiDreamTEModel`) run it.

Weights: transformers' `LlamaModel` modules (`embed_tokens`, `layers.N.self_attn.{q,k,v,o}_proj`,
`layers.N.mlp.{gate,up,down}_proj`, `layers.N.input_layernorm`, `layers.N.post_attention_layernorm`,
`norm`) held as `transformer.model`, so the parameter names are ComfyUI's (`llama.transformer.
model.layers.0...` in the set). Files: ComfyUI's `llama_3.1_8b_instruct_fp8_scaled.safetensors`
(without its scales: see below) and the Hugging Face checkpoint share the layout `model.*` (an
`lm_head.weight` is ignored). Built on transformers' classes for the modules and names only; the
forward pass is ours (the Qwen3 tower's, `qwen3.py`), so every layer computes in float32 whatever
the weights are stored in (bf16, fp16, fp8: one layer's weights cast at a time) and attention goes
through the backend in force.

The block: RMSNorm (eps 1e-5); q/k/v projections without bias; rotary position embedding (the
rotate-half form, theta 500000, no QK norm); grouped-query attention (8 key/value heads for 32
query heads in the 8B); output projection; RMSNorm; SwiGLU feed-forward. ComfyUI applies no
Llama-3.1 RoPE frequency scaling (its `Llama2Config.rope_scale` is None), and neither does this
tower: its states equal transformers' `LlamaModel` with the default RoPE. The attention mask is
the Qwen3 tower's (causal, plus the keys the token mask excludes).

`LlamaTextEncoder` is ComfyUI's `SDClipModel` as HiDream's `LLAMAModel` sets it up: layer "all"
(the input of every block and the final normed output stacked, `[B, layers + 1, T, W]`: the
embeddings, the outputs of blocks 0 .. n-2, the final norm of block n-1's output, ComfyUI's
`intermediate_output="all"`), no norm on the intermediates, special tokens start 128000
(`<|begin_of_text|>`) and pad 128009 (`<|eot_id|>`), attention masks used and returned; the token
mask is 1 up to the first pad (`qwen3.token_mask`). HiDream's set then drops the embeddings
(`[:, 1:]`). `set_clip_options({"layer": n})` leaves "all" in force, as ComfyUI's does.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch
from torch import nn

from comfy_core.models.float32_compute import compute_in_float32
from comfy_core.text_encoders.decoder_llm import (DecoderShape, attention_block_shapes, convert_weights,
                                                  detect_fixed_heads, embed_tokens, load_decoder, prenorm_block)
from comfy_core.text_encoders.errors import TextEncoderDetectionError, TextEncoderKeyError
from comfy_core.text_encoders.qwen3 import Qwen3TextEncoder, Qwen3Transformer
from comfy_core.text_encoders.token_chunks import EmbeddingOverride

MARKER = "model.layers.0.self_attn.q_proj.weight"
QK_NORM = "model.layers.0.self_attn.q_norm.weight"  # Qwen3 (not this tower)
QKV_BIAS = "model.layers.0.self_attn.q_proj.bias"  # Qwen2 / Qwen2.5 (not this tower)
GEMMA_MARKER = "model.layers.0.post_feedforward_layernorm.weight"
LLAMA_SLOT = "llama"
START_ID = 128000  # <|begin_of_text|>
PAD_ID = 128009  # <|eot_id|>, HiDream's pad


class LlamaDetectionError(TextEncoderDetectionError, ValueError):
    """A Llama tower's tensors are incomplete or inconsistent (names the key at fault)."""


class LlamaKeyError(TextEncoderKeyError, ValueError):
    """A Llama state-dict key is missing, unknown, unsupported or of the wrong shape."""


def is_plain_decoder(tensors: Mapping[str, Any], prefix: str = "") -> bool:
    """Whether `prefix` holds a Llama-architecture decoder: q projections without bias, QK norm
    or Gemma's sandwich norms (ComfyUI's `detect_te_model` order). Names only."""
    return prefix + MARKER in tensors and not any(prefix + m in tensors for m in (QK_NORM, QKV_BIAS, GEMMA_MARKER))


@dataclass(frozen=True)
class LlamaConfig(DecoderShape):
    """One Llama decoder used as a text encoder. What shapes cannot show is ComfyUI's
    `Llama2Config` (head width 128, RMS epsilon 1e-5, rope theta 500000)."""

    prefix: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    vocab_size: int
    head_dim: int = 128
    rms_norm_eps: float = 1e-5
    rope_theta: float = 500_000.0
    dtype: str = "F32"
    slot: str = LLAMA_SLOT

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "",
                            head_dim: int = 128) -> "LlamaConfig | None":
        """The config of the Llama tower under `prefix`, or None when there is none (no decoder
        there, or a Qwen2 / Qwen3 / Gemma one). `tensors`: names -> objects with `.shape`, never
        tensor data. `head_dim`: not in the weights (128 in every Llama 3). Raises
        `LlamaDetectionError` for incomplete or inconsistent towers."""
        if not is_plain_decoder(tensors, prefix):
            return None
        return detect_fixed_heads(cls, tensors, prefix, head_dim, LlamaDetectionError, "Llama")

    def block_shapes(self, index: int) -> dict[str, tuple[int, ...]]:
        """Name (relative to `model.`) -> shape of every weight of block `index`."""
        base = f"layers.{index}."
        return {base + "input_layernorm.weight": (self.hidden_size,), **attention_block_shapes(self, index),
                base + "post_attention_layernorm.weight": (self.hidden_size,)}

    def to_transformers(self) -> Any:
        """transformers' `LlamaConfig` for a model of this shape (modules and names only)."""
        from transformers import LlamaConfig as HFLlamaConfig

        config = HFLlamaConfig(
            **self.transformers_shape(), attention_bias=False, mlp_bias=False, tie_word_embeddings=False,
            max_position_embeddings=131072)
        config._attn_implementation = "sdpa"
        return config


@dataclass(frozen=True)
class LlamaOptions:
    """How the tower runs when no encoder set gave it options (HiDream's `LLAMAModel`: layer
    "all"; `layer_idx` is used only when `all_layers` is off)."""

    slot: str = LLAMA_SLOT
    token_key: str = LLAMA_SLOT
    pad_token: int = PAD_ID
    start_token: int = START_ID
    all_layers: bool = True
    layer_idx: int | None = None
    layer_norm_hidden: bool = False
    projected_pooled: bool = False


class LlamaTextEncoder(Qwen3TextEncoder):
    """One Llama tower, ComfyUI's `LLAMAModel` surface; the token handling, masks, prompt weights
    and clip options are the Qwen3 tower's, the block and the "all" output are Llama's."""

    can_generate = False

    def __init__(self, config: LlamaConfig, transformer: Qwen3Transformer) -> None:
        super().__init__(config, transformer)  # type: ignore[arg-type]
        self.options = self.default_options = LlamaOptions(slot=config.slot, token_key=config.slot)

    @property
    def special_tokens(self) -> dict[str, int]:
        return {"start": int(getattr(self.options, "start_token", START_ID)),
                "pad": int(getattr(self.options, "pad_token", PAD_ID))}

    def set_clip_options(self, options: Mapping[str, Any]) -> None:
        """ComfyUI's: with layer "all" a layer choice changes nothing; otherwise as the Qwen3 tower."""
        if getattr(self.options, "all_layers", True):
            return
        super().set_clip_options(options)

    def empty_tokens(self, length: int) -> list[int]:
        """ComfyUI's `gen_empty_tokens` with a start token and no end token: start, then pads."""
        return ([self.special_tokens["start"]] + [self.special_tokens["pad"]] * (length - 1))[:length]

    def embed_ids(self, ids: torch.Tensor) -> torch.Tensor:
        return embed_tokens(self.token_embedding(), ids, self.config.vocab_size, "llama")

    def encode_ids(self, ids: torch.Tensor, overrides: Sequence[EmbeddingOverride] = (),
                   layer_idx: int | None = None, layer_norm_hidden: bool = False,
                   attention_mask: torch.Tensor | None = None, all_layers: bool | None = None) -> torch.Tensor:
        """ids [B, T] -> with `all_layers` (default: the options') `[B, layers + 1, T, W]` (every
        block's input, then the final normed output), else the one state the Qwen3 tower's rules
        select `[B, T, W]`; float32."""
        if all_layers is None:
            all_layers = bool(getattr(self.options, "all_layers", True))  # an encoder set's options: "all"
        if not all_layers:
            return super().encode_ids(ids, overrides, layer_idx=layer_idx, layer_norm_hidden=layer_norm_hidden,
                                      attention_mask=attention_mask)
        x, cos, sin, bias = self._prepare(ids, overrides, attention_mask, "llama")
        model = self.transformer.model
        states = []
        for block in model.layers:
            states.append(x)
            x = self._block(block, x, cos, sin, bias)
        states.append(compute_in_float32(model.norm, x))
        return torch.stack(states, dim=1).float()  # [B, layers + 1, T, W]

    def _block(self, block: nn.Module, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               bias: torch.Tensor, cache: Any = None, layer: int = 0) -> torch.Tensor:
        """One Llama decoder block: the Qwen3 block without the QK norms."""
        return prenorm_block(block, x, cos, sin, bias, self.config)


_IGNORED_KEYS = ("lm_head.weight", "logit_scale")


def llama_state_dict(config: LlamaConfig, state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The file's tensors under `config.prefix` -> `LlamaModel` names (without `model.`). Unknown
    keys under the prefix are a `LlamaKeyError`, never dropped; ComfyUI's scaled-fp8 / float8
    scales become `scales` (`decoder_llm.convert_weights`)."""
    return convert_weights(config.prefix, state_dict, _IGNORED_KEYS, LlamaKeyError, "Llama", "Llama")


def build_llama_encoder(config: LlamaConfig, state_dict: Mapping[str, torch.Tensor],
                        dtype: torch.dtype | None = None) -> LlamaTextEncoder:
    """Build on the meta device, then load the file's tensors with `assign=True`. `dtype`: the
    storage dtype (computation is float32 anyway); None keeps each tensor as the file stores it
    (ComfyUI's `dtype_llama`)."""
    from transformers import LlamaModel

    model = load_decoder(LlamaModel, config, llama_state_dict(config, state_dict), dtype, LlamaKeyError, "Llama")
    return LlamaTextEncoder(config, Qwen3Transformer(model))


__all__ = ["LLAMA_SLOT", "LlamaConfig", "LlamaDetectionError", "LlamaKeyError", "LlamaOptions", "LlamaTextEncoder",
           "PAD_ID", "START_ID", "build_llama_encoder", "llama_state_dict"]
