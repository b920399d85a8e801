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

import re
from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention.calling import attention_in_force
from comfy_core.checkpoint.meta_build import meta_build
from comfy_core.models.float32_compute import compute_in_float32
from comfy_core.text_encoders.encoder import TokenEmbedding
from comfy_core.text_encoders.errors import TextEncoderDetectionError, TextEncoderKeyError, TokenizeError
from comfy_core.text_encoders.generate import GenerationError
from comfy_core.text_encoders.qwen3 import Qwen3TextEncoder, Qwen3Transformer, apply_rotary

MARKER = "model.layers.0.post_feedforward_layernorm.weight"  # Gemma 2 / 3 (ComfyUI tests it first)
QK_NORM = "model.layers.0.self_attn.q_norm.weight"  # Gemma 3 (not this tower)
GEMMA2_2B_SLOT = "gemma2_2b"
GEMMA2_2B_WIDTH = 2304
START_ID = 2  # <bos>
PAD_ID = 0  # <pad>
HEAD_DIM = 256
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
_LAYER = re.compile(r"model\.layers\.(\d+)\.")
# Keys a Gemma file may hold that the encoder does not read: the tokenizer ComfyUI's file carries,
# an LM head, ComfyUI's SDClipModel `logit_scale`.
_IGNORED_KEYS = ("spiece_model", "lm_head.weight", "logit_scale")


class GemmaDetectionError(TextEncoderDetectionError, ValueError):
    """A Gemma tower's tensors are incomplete or inconsistent (names the key at fault)."""


class GemmaKeyError(TextEncoderKeyError, ValueError):
    """A Gemma state-dict key is missing, unknown, unsupported or of the wrong shape."""


def _shape(tensors: Mapping[str, Any], key: str, ndim: int) -> tuple[int, ...]:
    try:
        shape = tuple(int(d) for d in tensors[key].shape)
    except KeyError:
        raise GemmaDetectionError(f"Gemma key {key!r} is missing") from None
    if len(shape) != ndim:
        raise GemmaDetectionError(f"Gemma key {key!r}: expected {ndim} dimensions, got shape {shape}")
    return shape


@dataclass(frozen=True)
class GemmaConfig:
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

    @property
    def width(self) -> int:
        return self.hidden_size

    @property
    def layers(self) -> int:
        return self.num_layers

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "",
                            head_dim: int = HEAD_DIM) -> "GemmaConfig | None":
        """The config of the Gemma 2 tower under `prefix`, or None when there is none (no Gemma
        there, or a Gemma 3 one). `tensors`: names -> objects with `.shape`, never tensor data.
        `head_dim`: not in the weights (256, ComfyUI's). Raises `GemmaDetectionError` for
        incomplete or inconsistent towers."""
        if prefix + MARKER not in tensors or prefix + QK_NORM in tensors:
            return None
        model = prefix + "model."
        vocab, hidden = _shape(tensors, model + "embed_tokens.weight", 2)
        attn = model + "layers.0.self_attn."
        q_out, _ = _shape(tensors, attn + "q_proj.weight", 2)
        k_out, _ = _shape(tensors, attn + "k_proj.weight", 2)
        if not k_out or q_out % head_dim or k_out % head_dim or (q_out // head_dim) % max(k_out // head_dim, 1):
            raise GemmaDetectionError(f"{attn}q_proj / k_proj: {q_out} / {k_out} outputs do not split into heads of "
                                      f"{head_dim} with query heads shared evenly by key/value heads")
        intermediate, _ = _shape(tensors, model + "layers.0.mlp.gate_proj.weight", 2)
        indices = {int(m.group(1)) for name in tensors if name.startswith(model)
                   for m in [_LAYER.match(name[len(prefix):])] if m}
        layers = max(indices) + 1
        if sorted(indices) != list(range(layers)):
            raise GemmaDetectionError(f"{model}layers: block indices {sorted(indices)} are not 0..{layers - 1}")
        config = cls(prefix=prefix, hidden_size=hidden, intermediate_size=intermediate, num_layers=layers,
                     num_heads=q_out // head_dim, num_kv_heads=k_out // head_dim, vocab_size=vocab,
                     head_dim=head_dim, dtype=str(getattr(tensors.get(model + "norm.weight"), "dtype", "F32")))
        expected = {"norm.weight": (hidden,)}
        for index in range(layers):
            expected.update(config.block_shapes(index))
        for name, shape in expected.items():
            found = _shape(tensors, model + name, len(shape))
            if found != shape:
                raise GemmaDetectionError(f"Gemma key {model + name!r}: expected shape {shape}, got {found}")
        return config

    def block_shapes(self, index: int) -> dict[str, tuple[int, ...]]:
        """Name (relative to `model.`) -> shape of every weight of block `index`."""
        base = f"layers.{index}."
        inner, kv = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        shapes = {base + f"{norm}_layernorm.weight": (self.hidden_size,)
                  for norm in ("input", "post_attention", "pre_feedforward", "post_feedforward")}
        shapes.update({
            base + "self_attn.q_proj.weight": (inner, self.hidden_size),
            base + "self_attn.k_proj.weight": (kv, self.hidden_size),
            base + "self_attn.v_proj.weight": (kv, self.hidden_size),
            base + "self_attn.o_proj.weight": (self.hidden_size, inner),
            base + "mlp.gate_proj.weight": (self.intermediate_size, self.hidden_size),
            base + "mlp.up_proj.weight": (self.intermediate_size, self.hidden_size),
            base + "mlp.down_proj.weight": (self.hidden_size, self.intermediate_size),
        })
        return shapes

    def to_transformers(self) -> Any:
        """transformers' `Gemma2Config` for a model of this shape, set to what ComfyUI runs: no
        attention soft-cap, no sliding window (a window longer than any prompt), query scale
        1/sqrt(head width)."""
        from transformers import Gemma2Config

        config = Gemma2Config(
            vocab_size=self.vocab_size, hidden_size=self.hidden_size, intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_layers, num_attention_heads=self.num_heads,
            num_key_value_heads=self.num_kv_heads, head_dim=self.head_dim, rms_norm_eps=self.rms_norm_eps,
            rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta}, attention_bias=False,
            query_pre_attn_scalar=self.head_dim, attn_logit_softcapping=None, final_logit_softcapping=None,
            sliding_window=1 << 20, hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
            use_cache=False, max_position_embeddings=8192)
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
        embedding = self.token_embedding()
        ids = ids.to(device=embedding.weight.device, dtype=torch.long)
        if ids.numel() and (int(ids.max()) >= self.config.vocab_size or int(ids.min()) < 0):
            raise TokenizeError(f"gemma: token id {int(ids.max())} is outside this encoder's "
                                f"{self.config.vocab_size}-token table")
        x = embedding(ids, out_dtype=torch.float32)
        if embedding.weight.dtype in FP8_DTYPES:
            x = torch.nan_to_num(x)
        return x * (self.config.hidden_size ** 0.5)

    def _block(self, block: nn.Module, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               bias: torch.Tensor, cache: Any = None, layer: int = 0) -> torch.Tensor:
        """One Gemma 2 decoder block (see the module doc)."""
        if cache is not None:
            raise GenerationError("gemma: the Gemma 2 encoder does not generate text (ComfyUI's Lumina 2 "
                                  "encoder is for conditioning only here)")
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
        x = x + compute_in_float32(block.post_attention_layernorm, compute_in_float32(attn.o_proj, out))
        normed = compute_in_float32(block.pre_feedforward_layernorm, x)
        mlp = block.mlp
        inner = F.gelu(compute_in_float32(mlp.gate_proj, normed), approximate="tanh") \
            * compute_in_float32(mlp.up_proj, normed)
        return x + compute_in_float32(block.post_feedforward_layernorm, compute_in_float32(mlp.down_proj, inner))


def gemma_state_dict(config: GemmaConfig, state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The file's tensors under `config.prefix` -> `Gemma2Model` names (without `model.`). Unknown
    keys under the prefix (scaled-fp8 scales included) are a `GemmaKeyError`, never dropped."""
    prefix, model = config.prefix, config.prefix + "model."
    out: dict[str, torch.Tensor] = {}
    for key in state_dict.keys():
        if not key.startswith(prefix):
            continue
        name = key[len(prefix):]
        if name in _IGNORED_KEYS:
            continue
        if key.startswith(model) and name.endswith(".weight"):
            out[key[len(model):]] = state_dict[key]
        else:
            raise GemmaKeyError(f"Gemma key {key!r} is not a weight of a Gemma 2 text encoder"
                                + (" (scaled-fp8 / quantised Gemma files are not supported yet)"
                                   if "scale" in name or "quant" in name else ""))
    return out


def build_gemma_encoder(config: GemmaConfig, state_dict: Mapping[str, torch.Tensor],
                        dtype: torch.dtype | None = None) -> GemmaTextEncoder:
    """Build on the meta device, then load the file's tensors with `assign=True`. `dtype`: the
    storage dtype (computation is float32 anyway); None keeps each tensor as the file stores it
    (ComfyUI's `dtype_llama`)."""
    from transformers import Gemma2Model

    with meta_build():
        model = Gemma2Model(config.to_transformers())
    model.rotary_emb = None  # RoPE tables are computed per call (`rotary_tables`)
    model.embed_tokens.__class__ = TokenEmbedding  # ComfyUI's embedding(ids, out_dtype) convention
    expected = {name: tensor for name, tensor in model.state_dict().items()}
    converted = gemma_state_dict(config, state_dict)
    missing = sorted(set(expected) - set(converted))
    if missing:
        shown = [config.prefix + "model." + m for m in missing[:5]]
        raise GemmaKeyError(f"Gemma encoder (prefix {config.prefix!r}) is missing keys: "
                            f"{shown}{' ...' if len(missing) > 5 else ''}")
    loaded: dict[str, torch.Tensor] = {}
    for name, tensor in converted.items():
        key = config.prefix + "model." + name
        if name not in expected:
            raise GemmaKeyError(f"Gemma key {key!r} is not a parameter of this {config.num_layers}-block encoder")
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise GemmaKeyError(f"Gemma key {key!r}: expected shape {tuple(expected[name].shape)}, "
                                f"got {tuple(tensor.shape)}")
        loaded[name] = tensor if dtype is None or tensor.dtype == dtype else tensor.to(dtype)
    model.load_state_dict(loaded, strict=True, assign=True)
    model.eval()
    model.requires_grad_(False)
    return GemmaTextEncoder(config, Qwen3Transformer(model))


__all__ = ["GEMMA2_2B_SLOT", "GEMMA2_2B_WIDTH", "GemmaConfig", "GemmaDetectionError", "GemmaKeyError", "GemmaOptions",
           "GemmaTextEncoder", "PAD_ID", "START_ID", "build_gemma_encoder", "gemma_state_dict"]
