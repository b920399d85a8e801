"""What the decoder-LLM text towers share (`qwen3.py`, `qwen25vl.py`, `llama.py`, `mistral.py`,
`gemma.py`): reading a tower's shape from `model.layers.N` names and shapes, the strict loading of
a converted state dict into transformers' modules built on the meta device, and the pieces of the
float32 forward pass (rotate-half RoPE tables, the causal attention bias, the q/k/v split and
grouped-query attention, the SwiGLU feed-forward, the pre-norm block, running blocks up to the
chosen layer). Each tower keeps its own differences (norm kinds, QK norm, biases, embedding scale,
M-RoPE, error types and messages) in its file and passes them in.

Quantised files, read for every tower the same way: ComfyUI's scaled-fp8 text encoders (legacy
`scaled_fp8` marker + `scale_weight`, and today's per-layer `comfy_quant` float8 form) keep their
fp8 weights as stored and compute weight x scale in float32 (`convert_weights`, `scale_linears`);
GGUF tensors (`comfy_core.weights.gguf`) keep linear weights quantised as `GGUFLinear` layers
(`load_strict`).
"""
from __future__ import annotations

import json
import re
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention.calling import attention_in_force
from comfy_core.checkpoint.meta_build import meta_build
from comfy_core.models.float32_compute import compute_in_float32
from comfy_core.text_encoders.encoder import TokenEmbedding, resolve_layer
from comfy_core.text_encoders.errors import TextEncoderError, TokenizeError
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

# ComfyUI's quantised text-encoder files, as today's ComfyUI reads them (comfy/utils.py
# `convert_old_quants`, comfy/ops.py `mixed_precision_ops`): the legacy scaled-fp8 form (a
# `scaled_fp8` marker, per linear layer a `scale_weight` and optionally a `scale_input`) and the
# per-layer form (`<layer>.comfy_quant`, a JSON object as uint8 bytes naming the layer's format,
# with `<layer>.weight_scale` / `<layer>.input_scale`; a file may give the same JSON as its
# `_quantization_metadata` header entry instead). The float8 formats keep the fp8 weight, the true
# weight being weight x scale; text encoders compute in float32 (no fp8 matrix products), so the
# input scales are checked and not used.
SCALED_FP8_MARKER = "scaled_fp8"
WEIGHT_SCALE_SUFFIXES = (".scale_weight", ".weight_scale")
INPUT_SCALE_SUFFIXES = (".scale_input", ".input_scale")
QUANT_CONF_SUFFIX = ".comfy_quant"
FLOAT8_FORMATS = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}


class ConvertedWeights(dict):
    """Module-relative name -> tensor (what `convert_weights` gives), with `scales`: the true-weight
    scale of each scaled linear weight (module-relative weight name -> float32 scalar), and
    `head_scale`: the LM head's (None unless the file scales it)."""

    def __init__(self) -> None:
        super().__init__()
        self.scales: dict[str, torch.Tensor] = {}
        self.head_scale: torch.Tensor | None = None


def layer_quantization(prefix: str, state_dict: Mapping[str, Any], error: type[Exception],
                       family: str) -> dict[str, dict[str, Any]]:
    """The per-layer quantisation of the file's tensors under `prefix`: layer name (relative to the
    prefix) -> its `comfy_quant` JSON object; `error` for one that is not a JSON object."""
    layers: dict[str, dict[str, Any]] = {}
    for key in state_dict.keys():
        if key.startswith(prefix) and key.endswith(QUANT_CONF_SUFFIX):
            raw = state_dict[key]
            try:
                conf = json.loads(bytes(raw.reshape(-1).to(torch.uint8).tolist()).decode("utf-8"))
            except (ValueError, UnicodeDecodeError, AttributeError) as exc:
                raise error(f"{family} key {key!r}: not ComfyUI's quantisation JSON ({exc})") from None
            if not isinstance(conf, dict):
                raise error(f"{family} key {key!r}: quantisation metadata must be a JSON object, got {conf!r}")
            layers[key[len(prefix):-len(QUANT_CONF_SUFFIX)]] = conf
    return layers


def _scale_of(key: str, tensor: torch.Tensor, error: type[Exception], family: str) -> torch.Tensor:
    if tensor.numel() != 1:
        raise error(f"{family} key {key!r}: one scale per layer expected, got shape {list(tensor.shape)} "
                    "(block-scaled formats are not read for text encoders)")
    return tensor.detach().to(torch.float32).reshape(())


def convert_weights(prefix: str, state_dict: Mapping[str, torch.Tensor], ignored: Sequence[str],
                    error: type[Exception], family: str, encoder: str) -> ConvertedWeights:
    """The file's tensors under `prefix` -> module names (without `model.`). Keys in `ignored`
    (relative to the prefix) are skipped; ComfyUI's scaled-fp8 / float8 quantisation keys become
    `scales` (see above); any other key under the prefix that is not a `model.*` weight is `error`,
    never dropped, as are scales without their marker or metadata and formats other than float8."""
    model = prefix + "model."
    out = ConvertedWeights()
    legacy = prefix + SCALED_FP8_MARKER in state_dict
    quantized = layer_quantization(prefix, state_dict, error, family)
    for layer, conf in quantized.items():
        if conf.get("format") not in FLOAT8_FORMATS:
            raise error(f"{family} layer {prefix + layer!r}: quantisation format {conf.get('format')!r} is not read "
                        f"for text encoders (only {', '.join(FLOAT8_FORMATS)} with one scale per layer)")
    for key in state_dict.keys():
        if not key.startswith(prefix):
            continue
        name = key[len(prefix):]
        if (legacy and name == SCALED_FP8_MARKER) or name.endswith(QUANT_CONF_SUFFIX):
            continue
        suffix = next((s for s in WEIGHT_SCALE_SUFFIXES + INPUT_SCALE_SUFFIXES if name.endswith(s)), None)
        if suffix is not None:
            layer = name[:-len(suffix)]
            if (suffix.startswith(".scale_") and not legacy) or (suffix.endswith("_scale") and layer not in quantized):
                raise error(f"{family} key {key!r}: a quantisation scale in a file without "
                            + ("the scaled_fp8 marker" if suffix.startswith(".scale_") else
                               f"{layer + QUANT_CONF_SUFFIX!r} metadata"))
            scale = _scale_of(key, state_dict[key], error, family)
            if suffix in WEIGHT_SCALE_SUFFIXES:
                if layer == "lm_head":
                    out.head_scale = scale
                elif name.startswith("model."):
                    out.scales[layer[len("model."):] + ".weight"] = scale
                else:
                    raise error(f"{family} key {key!r} scales no weight of a {encoder} text encoder")
            continue
        if name in ignored:
            continue
        if key.startswith(model) and name.endswith(".weight"):
            out[key[len(model):]] = state_dict[key]
        else:
            raise error(f"{family} key {key!r} is not a weight of a {encoder} text encoder")
    for layer, conf in quantized.items():
        if layer.startswith("model.") and layer[len("model."):] + ".weight" not in out.scales:
            raise error(f"{family} layer {prefix + layer!r}: {conf.get('format')} without its weight_scale")
    return out


QUANTIZATION_METADATA = "_quantization_metadata"  # the safetensors header entry of the per-layer form


class QuantizationMetadataError(TextEncoderError, ValueError):
    """A file's `_quantization_metadata` header entry that is not ComfyUI's quantisation JSON."""


class QuantizationMetadataView(Mapping[str, Any]):
    """A file's tensors with its `_quantization_metadata` header entry (`{"layers": {layer: conf}}`)
    served as the per-layer `<prefix><layer>.comfy_quant` tensors, as ComfyUI's
    `convert_old_quants` puts them into the state dict; other names pass through."""

    def __init__(self, tensors: Mapping[str, Any], metadata_json: str, prefix: str = "") -> None:
        try:
            layers = json.loads(metadata_json)["layers"]
            if not isinstance(layers, dict):
                raise TypeError("'layers' is not an object")
        except (ValueError, KeyError, TypeError) as exc:
            raise QuantizationMetadataError(f"the {QUANTIZATION_METADATA!r} header entry is not ComfyUI's quantisation metadata "
                             f"({type(exc).__name__}: {exc})") from None
        self._tensors = tensors
        self._extra = {f"{prefix}{layer}{QUANT_CONF_SUFFIX}":
                       torch.tensor(list(json.dumps(conf).encode("utf-8")), dtype=torch.uint8)
                       for layer, conf in layers.items()}

    def __getitem__(self, name: str) -> Any:
        return self._extra[name] if name in self._extra else self._tensors[name]

    def __iter__(self):
        yield from self._tensors
        yield from (name for name in self._extra if name not in self._tensors)

    def __len__(self) -> int:
        return len(self._tensors) + sum(1 for name in self._extra if name not in self._tensors)

    def __contains__(self, name: object) -> bool:
        return name in self._extra or name in self._tensors


def with_quantization_metadata(tensors: Mapping[str, Any], metadata: Mapping[str, str] | None,
                               prefix: str = "") -> Mapping[str, Any]:
    """`tensors`, with the header's per-layer quantisation metadata as tensors when it has some."""
    if not metadata or QUANTIZATION_METADATA not in metadata:
        return tensors
    return QuantizationMetadataView(tensors, metadata[QUANTIZATION_METADATA], prefix)


def scale_linears(module: nn.Module, scales: Mapping[str, torch.Tensor], key_prefix: str,
                  error: type[Exception], family: str) -> None:
    """Each linear layer whose weight `scales` names becomes ComfyUI's scaled-fp8 layer
    (`storage_cast.ScaledFp8Linear`: the fp8 weight kept as stored, the true weight weight x scale,
    no fp8 matrix products, as ComfyUI's text encoders); `error` for a scale on anything else."""
    from comfy_core.models.layers import own_hook_lists
    from comfy_core.models.storage_cast import SCALE_WEIGHT, ScaledFp8Linear

    for name, scale in scales.items():
        layer_name = name[:-len(".weight")]
        try:
            layer = module.get_submodule(layer_name)
        except AttributeError:
            layer = None
        if not isinstance(layer, nn.Linear):
            raise error(f"{family} key {key_prefix + layer_name!r}: a weight scale on what is not a linear layer "
                        "of this encoder")
        if layer.weight.dtype not in FP8_DTYPES:
            raise error(f"{family} key {key_prefix + name!r}: a scaled float8 layer stored as {layer.weight.dtype}")
        own_hook_lists(layer)
        layer.__class__ = ScaledFp8Linear
        layer.register_buffer(SCALE_WEIGHT, scale.to(layer.weight.device))
        layer.scale_input = None
        layer.fp8_matrix_mult = False


def build_on_meta(model_class: Callable[[Any], nn.Module], hf_config: Any) -> nn.Module:
    """A transformers decoder built on the meta device, without its RoPE buffer (tables are
    computed per call) and with ComfyUI's `embedding(ids, out_dtype)` token table."""
    with meta_build():
        model = model_class(hf_config)
    model.rotary_emb = None
    model.embed_tokens.__class__ = TokenEmbedding
    return model


def load_strict(module: nn.Module, converted: Mapping[str, Any], key_prefix: str,
                dtype: torch.dtype | None, error: type[Exception], family: str, missing_owner: str,
                unknown_owner: str, keep: set[str] | frozenset[str] = frozenset()) -> None:
    """Assign `converted` (module-relative names) into `module` built on the meta device: every
    parameter present, each of its shape, nothing else (`error` otherwise, the key named with
    `key_prefix`); tensors cast to `dtype` unless None, already in it, or named in `keep`. A
    quantised GGUF linear weight (`weights.gguf.GGUFTensor`) makes its layer a `GGUFLinear`
    (the weight kept quantised, dequantised per call). Then eval mode, no gradients."""
    from comfy_core.weights.gguf import GGUFLinear, GGUFTensor

    expected = module.state_dict()
    missing = sorted(set(expected) - set(converted))
    if missing:
        shown = [key_prefix + m for m in missing[:5]]
        raise error(f"{missing_owner} is missing keys: {shown}{' ...' if len(missing) > 5 else ''}")
    loaded: dict[str, torch.Tensor] = {}
    quantized: dict[str, GGUFTensor] = {}
    for name, tensor in converted.items():
        key = key_prefix + name
        if name not in expected:
            raise error(f"{family} key {key!r} is not a parameter of {unknown_owner}")
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise error(f"{family} key {key!r}: expected shape {tuple(expected[name].shape)}, "
                        f"got {tuple(tensor.shape)}")
        if isinstance(tensor, GGUFTensor):
            quantized[name] = tensor
            continue
        loaded[name] = tensor if dtype is None or tensor.dtype == dtype or name in keep else tensor.to(dtype)
    module.load_state_dict(loaded, strict=not quantized, assign=True)
    for name, tensor in quantized.items():
        owner_name, _, attr = name.rpartition(".")
        owner = module.get_submodule(owner_name) if owner_name else module
        if attr != "weight" or not isinstance(owner, nn.Linear) or not owner_name:
            raise error(f"{family} key {key_prefix + name!r}: a quantised ({tensor.dtype}) tensor where only "
                        "linear weights may be quantised")
        parent_name, _, child = owner_name.rpartition(".")
        parent = module.get_submodule(parent_name) if parent_name else module
        setattr(parent, child, GGUFLinear(tensor, owner.bias))
    module.eval()
    module.requires_grad_(False)


def load_decoder(model_class: Callable[[Any], nn.Module], config: Any, converted: Mapping[str, Any],
                 dtype: torch.dtype | None, error: type[Exception], family: str) -> nn.Module:
    """`build_on_meta` a decoder of `config`'s shape, then `load_strict` the converted `model.*`
    tensors into it (keys named under `config.prefix`); the weights `converted.scales` names (a
    `ConvertedWeights`) are kept as stored and their layers computed with the scale."""
    model = build_on_meta(model_class, config.to_transformers())
    scales = getattr(converted, "scales", {})
    load_strict(model, converted, config.prefix + "model.", dtype, error, family,
                f"{family} encoder (prefix {config.prefix!r})", f"this {config.num_layers}-block encoder",
                keep=set(scales))
    scale_linears(model, scales, config.prefix + "model.", error, family)
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


__all__ = ["ConvertedWeights", "DecoderShape", "FP8_DTYPES", "layer_quantization", "scale_linears",
           "QuantizationMetadataError", "QuantizationMetadataView", "with_quantization_metadata", "LAYER_NAME", "apply_overrides", "apply_rotary", "attention_bias",
           "attention_block_shapes", "block_count", "build_on_meta", "check_block_shapes", "convert_weights",
           "detect_fixed_heads", "embed_tokens", "grouped_attention", "load_decoder", "load_strict", "prenorm_block",
           "project_qkv", "rotary_tables", "run_to_layer", "shape_of", "split_heads", "swiglu"]
