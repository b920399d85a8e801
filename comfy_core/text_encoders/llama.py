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

import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention.calling import attention_in_force
from comfy_core.checkpoint.meta_build import meta_build
from comfy_core.models.float32_compute import compute_in_float32
from comfy_core.text_encoders.errors import TextEncoderDetectionError, TextEncoderKeyError, TokenizeError
from comfy_core.text_encoders.encoder import TokenEmbedding
from comfy_core.text_encoders.qwen3 import (Qwen3TextEncoder, Qwen3Transformer, _apply_overrides, apply_rotary,
                                            attention_bias, rotary_tables)
from comfy_core.text_encoders.token_chunks import EmbeddingOverride

MARKER = "model.layers.0.self_attn.q_proj.weight"
QK_NORM = "model.layers.0.self_attn.q_norm.weight"  # Qwen3 (not this tower)
QKV_BIAS = "model.layers.0.self_attn.q_proj.bias"  # Qwen2 / Qwen2.5 (not this tower)
GEMMA_MARKER = "model.layers.0.post_feedforward_layernorm.weight"
LLAMA_SLOT = "llama"
START_ID = 128000  # <|begin_of_text|>
PAD_ID = 128009  # <|eot_id|>, HiDream's pad
_LAYER = re.compile(r"model\.layers\.(\d+)\.")


class LlamaDetectionError(TextEncoderDetectionError, ValueError):
    """A Llama tower's tensors are incomplete or inconsistent (names the key at fault)."""


class LlamaKeyError(TextEncoderKeyError, ValueError):
    """A Llama state-dict key is missing, unknown, unsupported or of the wrong shape."""


def _shape(tensors: Mapping[str, Any], key: str, ndim: int) -> tuple[int, ...]:
    try:
        shape = tuple(int(d) for d in tensors[key].shape)
    except KeyError:
        raise LlamaDetectionError(f"Llama key {key!r} is missing") from None
    if len(shape) != ndim:
        raise LlamaDetectionError(f"Llama key {key!r}: expected {ndim} dimensions, got shape {shape}")
    return shape


@dataclass(frozen=True)
class LlamaConfig:
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

    @property
    def width(self) -> int:
        return self.hidden_size

    @property
    def layers(self) -> int:
        return self.num_layers

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "",
                            head_dim: int = 128) -> "LlamaConfig | None":
        """The config of the Llama tower under `prefix`, or None when there is none (no decoder
        there, or a Qwen2 / Qwen3 / Gemma one). `tensors`: names -> objects with `.shape`, never
        tensor data. `head_dim`: not in the weights (128 in every Llama 3). Raises
        `LlamaDetectionError` for incomplete or inconsistent towers."""
        if prefix + MARKER not in tensors or any(prefix + m in tensors for m in (QK_NORM, QKV_BIAS, GEMMA_MARKER)):
            return None
        model = prefix + "model."
        vocab, hidden = _shape(tensors, model + "embed_tokens.weight", 2)
        attn = model + "layers.0.self_attn."
        q_out, _ = _shape(tensors, attn + "q_proj.weight", 2)
        k_out, _ = _shape(tensors, attn + "k_proj.weight", 2)
        if q_out % head_dim or k_out % head_dim or (q_out // head_dim) % max(k_out // head_dim, 1) or not k_out:
            raise LlamaDetectionError(f"{attn}q_proj / k_proj: {q_out} / {k_out} outputs do not split into heads of "
                                      f"{head_dim} with query heads shared evenly by key/value heads")
        intermediate, _ = _shape(tensors, model + "layers.0.mlp.gate_proj.weight", 2)
        indices = {int(m.group(1)) for name in tensors if name.startswith(model)
                   for m in [_LAYER.match(name[len(prefix):])] if m}
        layers = max(indices) + 1
        if sorted(indices) != list(range(layers)):
            raise LlamaDetectionError(f"{model}layers: block indices {sorted(indices)} are not 0..{layers - 1}")
        config = cls(prefix=prefix, hidden_size=hidden, intermediate_size=intermediate, num_layers=layers,
                     num_heads=q_out // head_dim, num_kv_heads=k_out // head_dim, vocab_size=vocab,
                     head_dim=head_dim, dtype=str(getattr(tensors.get(model + "norm.weight"), "dtype", "F32")))
        expected = {"norm.weight": (hidden,)}
        for index in range(layers):
            expected.update(config.block_shapes(index))
        for name, shape in expected.items():
            found = _shape(tensors, model + name, len(shape))
            if found != shape:
                raise LlamaDetectionError(f"Llama key {model + name!r}: expected shape {shape}, got {found}")
        return config

    def block_shapes(self, index: int) -> dict[str, tuple[int, ...]]:
        """Name (relative to `model.`) -> shape of every weight of block `index`."""
        base = f"layers.{index}."
        inner, kv = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        return {
            base + "input_layernorm.weight": (self.hidden_size,),
            base + "self_attn.q_proj.weight": (inner, self.hidden_size),
            base + "self_attn.k_proj.weight": (kv, self.hidden_size),
            base + "self_attn.v_proj.weight": (kv, self.hidden_size),
            base + "self_attn.o_proj.weight": (self.hidden_size, inner),
            base + "post_attention_layernorm.weight": (self.hidden_size,),
            base + "mlp.gate_proj.weight": (self.intermediate_size, self.hidden_size),
            base + "mlp.up_proj.weight": (self.intermediate_size, self.hidden_size),
            base + "mlp.down_proj.weight": (self.hidden_size, self.intermediate_size),
        }

    def to_transformers(self) -> Any:
        """transformers' `LlamaConfig` for a model of this shape (modules and names only)."""
        from transformers import LlamaConfig as HFLlamaConfig

        config = HFLlamaConfig(
            vocab_size=self.vocab_size, hidden_size=self.hidden_size, intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_layers, num_attention_heads=self.num_heads,
            num_key_value_heads=self.num_kv_heads, head_dim=self.head_dim, rms_norm_eps=self.rms_norm_eps,
            rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta}, attention_bias=False,
            mlp_bias=False, tie_word_embeddings=False, use_cache=False, max_position_embeddings=131072)
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
        embedding = self.token_embedding()
        ids = ids.to(device=embedding.weight.device, dtype=torch.long)
        if ids.numel() and (int(ids.max()) >= self.config.vocab_size or int(ids.min()) < 0):
            raise TokenizeError(f"llama: token id {int(ids.max())} is outside this encoder's "
                                f"{self.config.vocab_size}-token table")
        x = embedding(ids, out_dtype=torch.float32)
        return torch.nan_to_num(x) if embedding.weight.dtype in (torch.float8_e4m3fn, torch.float8_e5m2) else x

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
        if ids.dim() != 2:
            raise TokenizeError(f"llama: token ids must be [batch, tokens], got shape {tuple(ids.shape)}")
        x = self.embed_ids(ids)  # [B, T, W]
        if overrides:
            x = _apply_overrides(x, overrides)
        length = ids.shape[1]
        cos, sin = rotary_tables(length, self.config.head_dim, self.config.rope_theta, x.device)  # [T, d]
        bias = attention_bias(attention_mask, length, x.device)
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
        config = self.config
        batch, length, _ = x.shape
        attn = block.self_attn
        normed = compute_in_float32(block.input_layernorm, x)  # [B, T, W]
        q = compute_in_float32(attn.q_proj, normed).view(batch, length, config.num_heads, config.head_dim)
        k = compute_in_float32(attn.k_proj, normed).view(batch, length, config.num_kv_heads, config.head_dim)
        v = compute_in_float32(attn.v_proj, normed).view(batch, length, config.num_kv_heads, config.head_dim)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)  # [B, T, H|KV, d]
        groups = config.num_heads // config.num_kv_heads
        if groups > 1:  # grouped-query attention
            k = k.repeat_interleave(groups, dim=2)
            v = v.repeat_interleave(groups, dim=2)
        out = attention_in_force(q.reshape(batch, length, -1), k.reshape(batch, length, -1),
                                 v.reshape(batch, length, -1), config.num_heads, mask=bias)  # [B, T, H*d]
        x = x + compute_in_float32(attn.o_proj, out)
        normed = compute_in_float32(block.post_attention_layernorm, x)
        mlp = block.mlp
        inner = F.silu(compute_in_float32(mlp.gate_proj, normed)) * compute_in_float32(mlp.up_proj, normed)
        return x + compute_in_float32(mlp.down_proj, inner)


_IGNORED_KEYS = ("lm_head.weight", "logit_scale")


def llama_state_dict(config: LlamaConfig, state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The file's tensors under `config.prefix` -> `LlamaModel` names (without `model.`). Unknown
    keys under the prefix (scaled-fp8 scales included) are a `LlamaKeyError`, never dropped."""
    prefix, model = config.prefix, config.prefix + "model."
    out: dict[str, torch.Tensor] = {}
    for key, tensor in state_dict.items():
        if not key.startswith(prefix):
            continue
        name = key[len(prefix):]
        if name in _IGNORED_KEYS:
            continue
        if key.startswith(model) and name.endswith(".weight"):
            out[key[len(model):]] = tensor
        else:
            raise LlamaKeyError(f"Llama key {key!r} is not a weight of a Llama text encoder"
                                + (" (scaled-fp8 / quantised Llama files are not supported yet)"
                                   if "scale" in name or "quant" in name else ""))
    return out


def build_llama_encoder(config: LlamaConfig, state_dict: Mapping[str, torch.Tensor],
                        dtype: torch.dtype | None = None) -> LlamaTextEncoder:
    """Build on the meta device, then load the file's tensors with `assign=True`. `dtype`: the
    storage dtype (computation is float32 anyway); None keeps each tensor as the file stores it
    (ComfyUI's `dtype_llama`)."""
    from transformers import LlamaModel

    with meta_build():
        model = LlamaModel(config.to_transformers())
    model.rotary_emb = None  # RoPE tables are computed per call (`rotary_tables`)
    model.embed_tokens.__class__ = TokenEmbedding  # ComfyUI's embedding(ids, out_dtype) convention
    expected = model.state_dict()
    converted = llama_state_dict(config, state_dict)
    missing = sorted(set(expected) - set(converted))
    if missing:
        shown = [config.prefix + "model." + m for m in missing[:5]]
        raise LlamaKeyError(f"Llama encoder (prefix {config.prefix!r}) is missing keys: "
                            f"{shown}{' ...' if len(missing) > 5 else ''}")
    loaded: dict[str, torch.Tensor] = {}
    for name, tensor in converted.items():
        key = config.prefix + "model." + name
        if name not in expected:
            raise LlamaKeyError(f"Llama key {key!r} is not a parameter of this {config.num_layers}-block encoder")
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise LlamaKeyError(f"Llama key {key!r}: expected shape {tuple(expected[name].shape)}, "
                                f"got {tuple(tensor.shape)}")
        loaded[name] = tensor if dtype is None or tensor.dtype == dtype else tensor.to(dtype)
    model.load_state_dict(loaded, strict=True, assign=True)
    model.eval()
    model.requires_grad_(False)
    return LlamaTextEncoder(config, Qwen3Transformer(model))


__all__ = ["LLAMA_SLOT", "LlamaConfig", "LlamaDetectionError", "LlamaKeyError", "LlamaOptions", "LlamaTextEncoder",
           "PAD_ID", "START_ID", "build_llama_encoder", "llama_state_dict"]
