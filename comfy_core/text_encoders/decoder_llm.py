"""What the decoder-LLM text towers share (`qwen3.py`, `qwen25vl.py`, `llama.py`, `mistral.py`,
`gemma.py`): reading a tower's shape from `model.layers.N` names and shapes, the strict loading of
a converted state dict into transformers' modules built on the meta device, and the pieces of the
float32 forward pass (rotate-half RoPE tables, the causal attention bias, the q/k/v split and
grouped-query attention, the SwiGLU feed-forward, the pre-norm block, running blocks up to the
chosen layer). Each tower keeps its own differences (norm kinds, QK norm, biases, embedding scale,
M-RoPE, error types and messages) in its file and passes them in.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention.calling import attention_in_force
from comfy_core.checkpoint.meta_build import meta_build
from comfy_core.models.float32_compute import compute_in_float32
from comfy_core.text_encoders.encoder import TokenEmbedding, resolve_layer
from comfy_core.text_encoders.errors import TokenizeError
from comfy_core.text_encoders.token_chunks import EmbeddingOverride

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
LAYER_NAME = re.compile(r"model\.layers\.(\d+)\.")


class DecoderShape:
    """What every decoder config (a frozen dataclass with `hidden_size`, `num_layers`, heads, ...)
    offers besides its fields: ComfyUI's `width` / `layers` names and the keyword arguments of a
    transformers config of its shape."""

    @property
    def width(self) -> int:
        return self.hidden_size  # type: ignore[attr-defined]

    @property
    def layers(self) -> int:
        return self.num_layers  # type: ignore[attr-defined]

    def transformers_shape(self) -> dict[str, Any]:
        """The size, head split, RMS epsilon and default RoPE of a transformers decoder config."""
        c: Any = self
        return dict(vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
                    num_hidden_layers=c.num_layers, num_attention_heads=c.num_heads,
                    num_key_value_heads=c.num_kv_heads, head_dim=c.head_dim, rms_norm_eps=c.rms_norm_eps,
                    rope_parameters={"rope_type": "default", "rope_theta": c.rope_theta}, use_cache=False)


# --- detection ---

def shape_of(tensors: Mapping[str, Any], key: str, ndim: int, error: type[Exception], family: str) -> tuple[int, ...]:
    """The shape of `tensors[key]` (a header entry or a tensor), which must have `ndim` dimensions;
    `error` (naming `family` and the key) when it is missing or has another rank."""
    try:
        shape = tuple(int(d) for d in tensors[key].shape)
    except KeyError:
        raise error(f"{family} key {key!r} is missing") from None
    if len(shape) != ndim:
        raise error(f"{family} key {key!r}: expected {ndim} dimensions, got shape {shape}")
    return shape


def block_count(tensors: Mapping[str, Any], prefix: str, error: type[Exception]) -> int:
    """How many blocks `prefix + model.layers.N.` holds; `error` unless the indices are 0..n-1."""
    model = prefix + "model."
    indices = {int(m.group(1)) for name in tensors if name.startswith(model)
               for m in [LAYER_NAME.match(name[len(prefix):])] if m}
    layers = max(indices) + 1
    if sorted(indices) != list(range(layers)):
        raise error(f"{model}layers: block indices {sorted(indices)} are not 0..{layers - 1}")
    return layers


def split_heads(attn: str, q_out: int, k_out: int, head_dim: int, error: type[Exception]) -> tuple[int, int]:
    """(query heads, key/value heads) of projections with `q_out` / `k_out` outputs and heads of
    `head_dim`; `error` unless they split evenly and query heads share key/value heads evenly."""
    if not k_out or q_out % head_dim or k_out % head_dim or (q_out // head_dim) % max(k_out // head_dim, 1):
        raise error(f"{attn}q_proj / k_proj: {q_out} / {k_out} outputs do not split into heads of "
                    f"{head_dim} with query heads shared evenly by key/value heads")
    return q_out // head_dim, k_out // head_dim


def detect_fixed_heads(cls: Any, tensors: Mapping[str, Any], prefix: str, head_dim: int,
                       error: type[Exception], family: str) -> Any:
    """`cls` (a decoder config) read from the tower under `prefix` whose head width `head_dim` is
    not in the weights (Llama, Mistral, Gemma 2): sizes from the token table and block 0, the block
    count, the storage dtype from the final norm, then every block's and the final norm's shapes
    checked (`error` naming `family` and the key at fault)."""
    model = prefix + "model."
    vocab, hidden = shape_of(tensors, model + "embed_tokens.weight", 2, error, family)
    attn = model + "layers.0.self_attn."
    q_out, _ = shape_of(tensors, attn + "q_proj.weight", 2, error, family)
    k_out, _ = shape_of(tensors, attn + "k_proj.weight", 2, error, family)
    heads, kv_heads = split_heads(attn, q_out, k_out, head_dim, error)
    intermediate, _ = shape_of(tensors, model + "layers.0.mlp.gate_proj.weight", 2, error, family)
    layers = block_count(tensors, prefix, error)
    config = cls(prefix=prefix, hidden_size=hidden, intermediate_size=intermediate, num_layers=layers,
                 num_heads=heads, num_kv_heads=kv_heads, vocab_size=vocab,
                 head_dim=head_dim, dtype=str(getattr(tensors.get(model + "norm.weight"), "dtype", "F32")))
    check_block_shapes(tensors, model, config, error, family, {"norm.weight": (hidden,)})
    return config


def check_block_shapes(tensors: Mapping[str, Any], model: str, config: Any, error: type[Exception], family: str,
                       extra: Mapping[str, tuple[int, ...]] | None = None) -> None:
    """Every weight of every block (`config.block_shapes(i)`, names relative to `model`) and those
    in `extra` must be present with the expected shape; `error` naming the first key at fault."""
    expected = dict(extra or {})
    for index in range(config.num_layers):
        expected.update(config.block_shapes(index))
    for name, shape in expected.items():
        found = shape_of(tensors, model + name, len(shape), error, family)
        if found != shape:
            raise error(f"{family} key {model + name!r}: expected shape {shape}, got {found}")


def attention_block_shapes(config: Any, index: int, attn_bias: bool = False) -> dict[str, tuple[int, ...]]:
    """Name (relative to `model.`) -> shape of the attention projections and SwiGLU MLP of block
    `index` (with the q/k/v biases when `attn_bias`); norms are each tower's own."""
    base = f"layers.{index}."
    hidden, ffn = config.hidden_size, config.intermediate_size
    inner, kv = config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim
    shapes: dict[str, tuple[int, ...]] = {}
    for proj, out in (("q", inner), ("k", kv), ("v", kv)):
        shapes[base + f"self_attn.{proj}_proj.weight"] = (out, hidden)
        if attn_bias:
            shapes[base + f"self_attn.{proj}_proj.bias"] = (out,)
    shapes[base + "self_attn.o_proj.weight"] = (hidden, inner)
    shapes[base + "mlp.gate_proj.weight"] = (ffn, hidden)
    shapes[base + "mlp.up_proj.weight"] = (ffn, hidden)
    shapes[base + "mlp.down_proj.weight"] = (hidden, ffn)
    return shapes


# --- loading ---

def convert_weights(prefix: str, state_dict: Mapping[str, torch.Tensor], ignored: Sequence[str],
                    error: type[Exception], family: str, encoder: str) -> dict[str, torch.Tensor]:
    """The file's tensors under `prefix` -> module names (without `model.`). Keys in `ignored`
    (relative to the prefix) are skipped; any other key under the prefix that is not a `model.*`
    weight is `error` (scaled-fp8 scales and quantisation metadata named as such), never dropped."""
    model = prefix + "model."
    out: dict[str, torch.Tensor] = {}
    for key in state_dict.keys():
        if not key.startswith(prefix):
            continue
        name = key[len(prefix):]
        if name in ignored:
            continue
        if key.startswith(model) and name.endswith(".weight"):
            out[key[len(model):]] = state_dict[key]
        else:
            raise error(f"{family} key {key!r} is not a weight of a {encoder} text encoder"
                        + (f" (scaled-fp8 / quantised {family} files are not supported yet)"
                           if "scale" in name or "quant" in name else ""))
    return out


def build_on_meta(model_class: Callable[[Any], nn.Module], hf_config: Any) -> nn.Module:
    """A transformers decoder built on the meta device, without its RoPE buffer (tables are
    computed per call) and with ComfyUI's `embedding(ids, out_dtype)` token table."""
    with meta_build():
        model = model_class(hf_config)
    model.rotary_emb = None
    model.embed_tokens.__class__ = TokenEmbedding
    return model


def load_strict(module: nn.Module, converted: Mapping[str, torch.Tensor], key_prefix: str,
                dtype: torch.dtype | None, error: type[Exception], family: str, missing_owner: str,
                unknown_owner: str, keep: set[str] | frozenset[str] = frozenset()) -> None:
    """Assign `converted` (module-relative names) into `module` built on the meta device: every
    parameter present, each of its shape, nothing else (`error` otherwise, the key named with
    `key_prefix`); tensors cast to `dtype` unless None, already in it, or named in `keep`. Then
    eval mode, no gradients."""
    expected = module.state_dict()
    missing = sorted(set(expected) - set(converted))
    if missing:
        shown = [key_prefix + m for m in missing[:5]]
        raise error(f"{missing_owner} is missing keys: {shown}{' ...' if len(missing) > 5 else ''}")
    loaded: dict[str, torch.Tensor] = {}
    for name, tensor in converted.items():
        key = key_prefix + name
        if name not in expected:
            raise error(f"{family} key {key!r} is not a parameter of {unknown_owner}")
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise error(f"{family} key {key!r}: expected shape {tuple(expected[name].shape)}, "
                        f"got {tuple(tensor.shape)}")
        loaded[name] = tensor if dtype is None or tensor.dtype == dtype or name in keep else tensor.to(dtype)
    module.load_state_dict(loaded, strict=True, assign=True)
    module.eval()
    module.requires_grad_(False)


def load_decoder(model_class: Callable[[Any], nn.Module], config: Any, converted: Mapping[str, torch.Tensor],
                 dtype: torch.dtype | None, error: type[Exception], family: str) -> nn.Module:
    """`build_on_meta` a decoder of `config`'s shape, then `load_strict` the converted `model.*`
    tensors into it (keys named under `config.prefix`)."""
    model = build_on_meta(model_class, config.to_transformers())
    load_strict(model, converted, config.prefix + "model.", dtype, error, family,
                f"{family} encoder (prefix {config.prefix!r})", f"this {config.num_layers}-block encoder")
    return model


# --- the forward pass ---

def rotary_tables(length: int, head_dim: int, theta: float, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [T, head_dim] float32 of the rotate-half RoPE at positions 0..T-1."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    freqs = torch.arange(length, device=device, dtype=torch.float32)[:, None] * inv_freq[None, :]  # [T, d/2]
    angles = torch.cat((freqs, freqs), dim=-1)  # [T, d]
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, T, H, d] rotated: x * cos + rotate_half(x) * sin (rotate_half: (-x2, x1))."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos[None, :, None, :] + rotated * sin[None, :, None, :]


def attention_bias(mask: torch.Tensor | None, length: int, device: torch.device) -> torch.Tensor:
    """Additive float32 bias [B or 1, 1, T, T]: ComfyUI's `Llama2_` mask, `finfo.min / 4` on the
    keys the token mask excludes plus `finfo.min / 4` above the diagonal (causal)."""
    low = torch.finfo(torch.float32).min / 4
    bias = torch.full((length, length), low, dtype=torch.float32, device=device).triu_(1)[None, None]
    if mask is None:
        return bias
    excluded = (mask.to(device) == 0)[:, None, None, :]  # [B, 1, 1, T]
    return bias + torch.zeros(excluded.shape, dtype=torch.float32, device=device).masked_fill(excluded, low)


def apply_overrides(embeds: torch.Tensor, overrides: Sequence[EmbeddingOverride], tower: str) -> torch.Tensor:
    """Input embeddings [B, T, W] with the given positions replaced by embedding vectors
    (`TokenizeError` naming `tower` for one that does not fit)."""
    embeds = embeds.clone()
    batch, length, width = embeds.shape
    for override in overrides:
        vectors = override.vectors if override.vectors.dim() == 2 else override.vectors[None]
        end = override.position + vectors.shape[0]
        if vectors.shape[-1] != width or not (0 <= override.row < batch) or override.position < 0 or end > length:
            raise TokenizeError(f"{tower}: embedding override {tuple(vectors.shape)} at row {override.row}, "
                                f"positions {override.position}..{end - 1} does not fit [{batch}, {length}, {width}]")
        embeds[override.row, override.position:end] = vectors.to(device=embeds.device, dtype=embeds.dtype)
    return embeds


def embed_tokens(embedding: nn.Module, ids: torch.Tensor, vocab_size: int, tower: str,
                 skip_empty: bool = True) -> torch.Tensor:
    """ids [B, T] -> input embeddings [B, T, W] float32 (fp8 tables' NaNs zeroed); `TokenizeError`
    naming `tower` for an id outside the table (`skip_empty`: no check on an empty batch)."""
    ids = ids.to(device=embedding.weight.device, dtype=torch.long)
    if (ids.numel() or not skip_empty) and (int(ids.max()) >= vocab_size or int(ids.min()) < 0):
        raise TokenizeError(f"{tower}: token id {int(ids.max())} is outside this encoder's "
                            f"{vocab_size}-token table")
    x = embedding(ids, out_dtype=torch.float32)
    return torch.nan_to_num(x) if embedding.weight.dtype in FP8_DTYPES else x


def project_qkv(attn: nn.Module, normed: torch.Tensor, config: Any
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """normed [B, T, W] -> q [B, T, H, d], k and v [B, T, KV, d] (float32)."""
    batch, length, _ = normed.shape
    q = compute_in_float32(attn.q_proj, normed).view(batch, length, config.num_heads, config.head_dim)
    k = compute_in_float32(attn.k_proj, normed).view(batch, length, config.num_kv_heads, config.head_dim)
    v = compute_in_float32(attn.v_proj, normed).view(batch, length, config.num_kv_heads, config.head_dim)
    return q, k, v


def grouped_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, num_heads: int,
                      bias: torch.Tensor) -> torch.Tensor:
    """q [B, T, H, d] over k, v [B, S, KV, d] (each k/v head serving H / KV query heads) through
    the attention backend in force, with the additive `bias` -> [B, T, H*d]."""
    batch, length = q.shape[:2]
    keys = k.shape[1]
    groups = num_heads // k.shape[2]
    if groups > 1:
        k = k.repeat_interleave(groups, dim=2)
        v = v.repeat_interleave(groups, dim=2)
    return attention_in_force(q.reshape(batch, length, -1), k.reshape(batch, keys, -1),
                              v.reshape(batch, keys, -1), num_heads, mask=bias)


def swiglu(mlp: nn.Module, normed: torch.Tensor) -> torch.Tensor:
    """The SwiGLU feed-forward `down(silu(gate(x)) * up(x))` in float32."""
    inner = F.silu(compute_in_float32(mlp.gate_proj, normed)) * compute_in_float32(mlp.up_proj, normed)
    return compute_in_float32(mlp.down_proj, inner)


def prenorm_block(block: nn.Module, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, bias: torch.Tensor,
                  config: Any, qk_norm: bool = False, cache: Any = None, layer: int = 0) -> torch.Tensor:
    """One pre-norm decoder block (Llama / Qwen2 / Qwen3 / Mistral): RMSNorm, q/k/v (per-head
    q/k RMSNorm when `qk_norm`), RoPE, grouped-query attention (over the cache's keys and values
    of block `layer` when a cache is given), output projection, residual; RMSNorm, SwiGLU, residual."""
    attn = block.self_attn
    q, k, v = project_qkv(attn, compute_in_float32(block.input_layernorm, x), config)
    if qk_norm:
        q, k = compute_in_float32(attn.q_norm, q), compute_in_float32(attn.k_norm, k)
    q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    if cache is not None:
        k, v = cache.update(layer, k, v)  # [B, S, KV, d]: every position so far
    x = x + compute_in_float32(attn.o_proj, grouped_attention(q, k, v, config.num_heads, bias))
    return x + swiglu(block.mlp, compute_in_float32(block.post_attention_layernorm, x))


def run_to_layer(encoder: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, bias: torch.Tensor,
                 layer_idx: int | None, layer_norm_hidden: bool) -> torch.Tensor:
    """Run `encoder`'s blocks (`encoder._block`) on x [B, T, W]: block `layer_idx`'s output
    (negative from the end; through the final norm when `layer_norm_hidden`), the blocks after
    it not run; with `layer_idx` None the final normed output. float32."""
    model = encoder.transformer.model
    target = resolve_layer(layer_idx, encoder.num_layers)
    for index, block in enumerate(model.layers):
        x = encoder._block(block, x, cos, sin, bias)
        if index == target:
            return (compute_in_float32(model.norm, x) if layer_norm_hidden else x).float()
    return compute_in_float32(model.norm, x).float()


__all__ = ["DecoderShape", "FP8_DTYPES", "LAYER_NAME", "apply_overrides", "apply_rotary", "attention_bias",
           "attention_block_shapes", "block_count", "build_on_meta", "check_block_shapes", "convert_weights",
           "detect_fixed_heads", "embed_tokens", "grouped_attention", "load_decoder", "load_strict", "prenorm_block",
           "project_qkv", "rotary_tables", "run_to_layer", "shape_of", "split_heads", "swiglu"]
