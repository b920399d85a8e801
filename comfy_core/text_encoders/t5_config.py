"""`T5Config`: the shape of a T5 encoder (T5 v1.1 XXL of SD3 / Flux, or the original relu T5),
read from tensor names and shapes only.

Key layout (transformers' `T5EncoderModel`, which ComfyUI's `comfy/text_encoders/t5.py` keeps):
`shared.weight` [vocab, d_model]; per block N
`encoder.block.N.layer.0.SelfAttention.{q,k,v,o}.weight`, `encoder.block.N.layer.0.layer_norm.weight`,
`encoder.block.N.layer.1.DenseReluDense.{wi_0,wi_1,wo}.weight` (gated GELU, T5 v1.1) or
`...DenseReluDense.{wi,wo}.weight` (relu, original T5), `encoder.block.N.layer.1.layer_norm.weight`;
`encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight` [buckets, heads] (block 0
only: T5 shares one position bias); `encoder.final_layer_norm.weight`. UMT5 (Chung et al. 2023,
"UniMax"; Wan's umT5-XXL, ComfyUI's `model_type` "umt5") has the same names with a
`relative_attention_bias` in every block: `relative_attention_per_block`, slot `umt5xxl`.

Prefixes seen in the wild: "" (ComfyUI's models/text_encoders/t5xxl_*.safetensors, diffusers'
`text_encoder_3/`), `text_encoders.t5xxl.transformer.` (SD3.5 / Flux single files). Heads come
from the bias table's shape, the head width from q's; what shapes cannot show follows the
published models (Raffel et al. 2020, "Exploring the Limits of Transfer Learning..."; T5 v1.1):
relative-position max distance 128, RMS-norm epsilon 1e-6, gelu-tanh or relu.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from comfy_core.text_encoders.errors import TextEncoderDetectionError

ACT_GATED_GELU = "gated-gelu"
ACT_RELU = "relu"
_BLOCK = "encoder.block."
UMT5_SLOT = "umt5xxl"  # ComfyUI's name of the tower (`WanT5Model(name="umt5xxl")`)
FP8_STORAGE = ("F8_E4M3", "F8_E5M2", "float8_e4m3fn", "float8_e5m2", "torch.float8_e4m3fn", "torch.float8_e5m2")


class T5DetectionError(TextEncoderDetectionError, ValueError):
    """A T5 encoder's tensors are incomplete or inconsistent (names the key at fault)."""


@dataclass(frozen=True)
class T5Config:
    """One T5 encoder: where its keys are and how it is shaped."""

    prefix: str  # key prefix in the file ("" or ending with ".")
    d_model: int
    d_kv: int  # width of one attention head
    d_ff: int
    num_layers: int
    num_heads: int
    vocab_size: int
    feed_forward: str  # "gated-gelu" (T5 v1.1: wi_0, wi_1, wo) | "relu" (T5: wi, wo)
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    layer_norm_epsilon: float = 1e-6
    dtype: str = "F32"  # storage dtype of the file's weights (safetensors name), from the final norm
    scaled_fp8: bool = False  # ComfyUI's `scaled_fp8` marker (per-layer `scale_weight` keys)
    embedding_key: str = "shared.weight"  # the token table's key under the prefix
    slot: str = "t5xxl"  # the child name in an encoder set (ComfyUI's `t5xxl`; UMT5: `umt5xxl`)
    # UMT5: every block has its own relative-attention table (T5: block 0's, shared by all blocks)
    relative_attention_per_block: bool = False

    @property
    def width(self) -> int:
        return self.d_model

    @property
    def layers(self) -> int:
        return self.num_layers

    @property
    def inner_dim(self) -> int:
        return self.d_kv * self.num_heads

    @property
    def gated(self) -> bool:
        return self.feed_forward == ACT_GATED_GELU

    @property
    def fp8(self) -> bool:
        return self.dtype in FP8_STORAGE

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "T5Config | None":
        """The config of the T5 encoder under `prefix`, or None when there is none.

        `tensors`: name -> object with `.shape` (a tuple) and optionally `.dtype` (a
        safetensors header entry; never tensor data). Raises `T5DetectionError` for a tower
        whose keys are incomplete or whose shapes disagree.
        """
        final_key = f"{prefix}encoder.final_layer_norm.weight"
        if final_key not in tensors:
            return None
        (d_model,) = _shape(tensors, final_key, ndim=1)
        embedding_key = "shared.weight" if f"{prefix}shared.weight" in tensors else "encoder.embed_tokens.weight"
        vocab, embed_width = _shape(tensors, prefix + embedding_key, ndim=2)
        _expect(prefix + embedding_key, (vocab, embed_width), (vocab, d_model))
        num_layers = _count_blocks(tensors, prefix)
        if num_layers == 0:
            raise T5DetectionError(f"{prefix}: a T5 final layer norm but no {_BLOCK}N.* keys")
        attn = f"{prefix}{_BLOCK}0.layer.0.SelfAttention."
        buckets, heads = _shape(tensors, attn + "relative_attention_bias.weight", ndim=2)
        inner, q_in = _shape(tensors, attn + "q.weight", ndim=2)
        _expect(attn + "q.weight", (inner, q_in), (inner, d_model))
        if inner % heads:
            raise T5DetectionError(f"{attn}q.weight: {inner} outputs do not split into {heads} heads "
                                   f"(from relative_attention_bias)")
        per_block = num_layers > 1 and \
            f"{prefix}{_BLOCK}1.layer.0.SelfAttention.relative_attention_bias.weight" in tensors
        dense = f"{prefix}{_BLOCK}0.layer.1.DenseReluDense."
        if f"{dense}wi_0.weight" in tensors:
            feed_forward = ACT_GATED_GELU
            d_ff = _shape(tensors, f"{dense}wi_0.weight", ndim=2)[0]
        elif f"{dense}wi.weight" in tensors:
            feed_forward = ACT_RELU
            d_ff = _shape(tensors, f"{dense}wi.weight", ndim=2)[0]
        else:
            raise T5DetectionError(f"T5 key {dense}wi_0.weight (gated) or {dense}wi.weight (relu) is missing")
        config = cls(prefix=prefix, d_model=d_model, d_kv=inner // heads, d_ff=d_ff, num_layers=num_layers,
                     num_heads=heads, vocab_size=vocab, feed_forward=feed_forward,
                     relative_attention_num_buckets=buckets, dtype=str(getattr(tensors[final_key], "dtype", "F32")),
                     scaled_fp8=f"{prefix}scaled_fp8" in tensors, embedding_key=embedding_key,
                     slot=UMT5_SLOT if per_block else "t5xxl", relative_attention_per_block=per_block)
        for block in range(num_layers):
            for name, shape in config.block_shapes(block).items():
                key = f"{prefix}{name}"
                if per_block and key not in tensors and name.endswith("relative_attention_bias.weight"):
                    raise T5DetectionError(f"T5 key {key!r} is missing: block 1 has its own relative_attention_bias, "
                                           "the UMT5 layout, where every block has one")
                _expect(key, _shape(tensors, key, ndim=len(shape)), shape)
        return config

    def block_shapes(self, block: int) -> dict[str, tuple[int, ...]]:
        """Name (without prefix) -> shape of every weight of block `block`."""
        base = f"{_BLOCK}{block}.layer."
        shapes: dict[str, tuple[int, ...]] = {
            f"{base}0.SelfAttention.q.weight": (self.inner_dim, self.d_model),
            f"{base}0.SelfAttention.k.weight": (self.inner_dim, self.d_model),
            f"{base}0.SelfAttention.v.weight": (self.inner_dim, self.d_model),
            f"{base}0.SelfAttention.o.weight": (self.d_model, self.inner_dim),
            f"{base}0.layer_norm.weight": (self.d_model,),
            f"{base}1.DenseReluDense.wo.weight": (self.d_model, self.d_ff),
            f"{base}1.layer_norm.weight": (self.d_model,),
        }
        if self.gated:
            shapes[f"{base}1.DenseReluDense.wi_0.weight"] = (self.d_ff, self.d_model)
            shapes[f"{base}1.DenseReluDense.wi_1.weight"] = (self.d_ff, self.d_model)
        else:
            shapes[f"{base}1.DenseReluDense.wi.weight"] = (self.d_ff, self.d_model)
        if block == 0 or self.relative_attention_per_block:
            shapes[f"{base}0.SelfAttention.relative_attention_bias.weight"] = (
                self.relative_attention_num_buckets, self.num_heads)
        return shapes

    @property
    def is_umt5(self) -> bool:
        return self.relative_attention_per_block

    def to_transformers(self) -> Any:
        """transformers' `T5Config` (`UMT5Config` for the UMT5 layout) for an encoder of this
        shape (SDPA attention)."""
        from transformers import T5Config as HFT5Config, UMT5Config

        config = (UMT5Config if self.relative_attention_per_block else HFT5Config)(
            vocab_size=self.vocab_size, d_model=self.d_model, d_kv=self.d_kv, d_ff=self.d_ff,
            num_layers=self.num_layers, num_heads=self.num_heads,
            relative_attention_num_buckets=self.relative_attention_num_buckets,
            relative_attention_max_distance=self.relative_attention_max_distance,
            dropout_rate=0.0, layer_norm_epsilon=self.layer_norm_epsilon,
            feed_forward_proj=self.feed_forward, is_encoder_decoder=False, use_cache=False,
            pad_token_id=0, eos_token_id=1, tie_word_embeddings=False,
        )
        config._attn_implementation = "sdpa"
        return config


def _shape(tensors: Mapping[str, Any], key: str, ndim: int) -> tuple[int, ...]:
    try:
        shape = tuple(int(d) for d in tensors[key].shape)
    except KeyError:
        raise T5DetectionError(f"T5 key {key!r} is missing") from None
    if len(shape) != ndim:
        raise T5DetectionError(f"T5 key {key!r}: expected {ndim} dimensions, got shape {shape}")
    return shape


def _expect(key: str, shape: tuple[int, ...], expected: tuple[int, ...]) -> None:
    if shape != expected:
        raise T5DetectionError(f"T5 key {key!r}: expected shape {expected}, got {shape}")


def _count_blocks(tensors: Mapping[str, Any], prefix: str) -> int:
    regex = re.compile(re.escape(prefix + _BLOCK) + r"(\d+)\.")
    found = {int(m.group(1)) for name in tensors if (m := regex.match(name))}
    if not found:
        return 0
    missing = sorted(set(range(max(found) + 1)) - found)
    if missing:
        raise T5DetectionError(f"T5 blocks {missing} are missing under {prefix + _BLOCK!r}")
    return max(found) + 1
