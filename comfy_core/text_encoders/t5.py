"""`T5TextEncoder`: the T5 encoder tower (T5-XXL v1.1 of SD3 / Flux) on transformers' `T5EncoderModel`.

The modules and parameter names are transformers' (which are ComfyUI's: `transformer.shared.weight`,
`transformer.encoder.block.N...`, `transformer.encoder.final_layer_norm.weight`); the forward pass
is ours, after the T5 encoder (Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a
Unified Text-to-Text Transformer"; T5 v1.1's gated-GELU feed-forward) as ComfyUI's
`comfy/text_encoders/t5.py` runs it:

- pre-norm blocks with RMS layer norms (no mean, no bias); no 1/sqrt(d) attention scaling: keys
  are multiplied by sqrt(d_kv) so the attention call's scaling cancels;
- one relative-position bias (block 0's table, bucketed as in Mesh TensorFlow), added to every
  block's attention scores; UMT5 (Wan's umT5-XXL, `T5Config.relative_attention_per_block`) has a
  table in every block, each block adding its own (ComfyUI's T5 with `model_type` "umt5";
  transformers' `UMT5EncoderModel` holds the weights then);
- attention through `attention_in_force` (the backend the patcher chose; SDPA by default);
- every layer computed in float32 whatever the weights are stored in (fp32, fp16, bf16 or fp8),
  one layer's weights cast at a time (`compute_in_float32`, ComfyUI's `manual_cast`); fp8 token
  embeddings pass through `nan_to_num`, as ComfyUI does for fp8 T5 weights.

Tokens and weighting follow ComfyUI's `comfy/sd1_clip.py: SDClipModel` as `sd3_clip.py:
T5XXLModel` sets it up: special tokens end 1, pad 0 (no start); attention masks off by default
(padding is attended, SD3 and Flux); `zero_out_masked` (ComfyUI's switch, on for Wan's umT5)
multiplies the output states by the token mask, so states after the first end token are zeros;
`encode_token_weights` interpolates weighted tokens from the empty prompt's encoding
(`weighting.interpolate_from_empty`); there is no pooled output.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention.calling import attention_in_force
from comfy_core.checkpoint.meta_build import meta_build
from comfy_core.models.float32_compute import compute_in_float32
from comfy_core.text_encoders.encoder import TokenEmbedding, resolve_layer
from comfy_core.text_encoders.errors import TextEncoderKeyError, TokenizeError
from comfy_core.text_encoders.t5_config import T5Config
from comfy_core.text_encoders.token_chunks import EmbeddingOverride, chunks_to_ids
from comfy_core.text_encoders.tower_options import TowerOptions
from comfy_core.text_encoders.weighting import interpolate_from_empty


T5_END = 1
T5_PAD = 0
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


class T5KeyError(TextEncoderKeyError, ValueError):
    """A T5 state-dict key is missing, unknown or of the wrong shape."""


@dataclass(frozen=True)
class T5Options:
    """How the tower runs when no encoder set gave it options (ComfyUI's T5XXLModel defaults).
    An encoder set's `EncoderOptions` for the slot works the same (read: pad_token, layer_idx,
    layer_norm_hidden)."""

    slot: str = "t5xxl"
    token_key: str = "t5xxl"
    pad_token: int = T5_PAD
    layer_idx: int | None = None  # None: the final output (after the final layer norm)
    layer_norm_hidden: bool = True  # a chosen layer's state goes through the final norm too
    projected_pooled: bool = False


def relative_position_buckets(query_length: int, key_length: int, num_buckets: int = 32,
                              max_distance: int = 128, device: torch.device | None = None) -> torch.Tensor:
    """[Tq, Tk] bucket index of each (query, key) offset, bidirectional (T5's encoder).

    Mesh TensorFlow's `_relative_position_bucket` (Raffel et al. 2020, §2.1): half the buckets for
    keys after the query, half for keys before; within a half, offsets below `num_buckets // 4`
    get one bucket each, larger ones share logarithmically wider buckets up to `max_distance`,
    beyond which all offsets share the last bucket.
    """
    query = torch.arange(query_length, dtype=torch.long, device=device)[:, None]
    key = torch.arange(key_length, dtype=torch.long, device=device)[None, :]
    offset = key - query  # [Tq, Tk]
    half = num_buckets // 2
    buckets = (offset > 0).to(torch.long) * half
    distance = offset.abs()
    exact = half // 2
    # log-spaced for distance >= exact (the small ones are replaced below; log(0) is never used)
    scaled = torch.log(distance.float().clamp(min=1) / exact) / math.log(max_distance / exact) * (half - exact)
    far = (exact + scaled.to(torch.long)).clamp(max=half - 1)
    return buckets + torch.where(distance < exact, distance, far)


def position_bias(table: torch.Tensor, length: int, max_distance: int) -> torch.Tensor:
    """Block 0's relative-attention table [buckets, heads] -> additive bias [1, heads, T, T] float32."""
    buckets = relative_position_buckets(length, length, table.shape[0], max_distance, table.device)  # [T, T]
    values = F.embedding(buckets, table).float()  # [T, T, H]
    return values.permute(2, 0, 1).unsqueeze(0).contiguous()


def key_padding_bias(mask: torch.Tensor) -> torch.Tensor:
    """Attention mask [B, T] (1 attend, 0 not) -> additive bias [B, 1, 1, T] float32 (ComfyUI's
    T5Stack fills masked keys with -float32 max)."""
    bias = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    bias = bias.masked_fill(mask == 0, -torch.finfo(torch.float32).max)
    return bias[:, None, None, :]


def attention_mask_of(ids: torch.Tensor, end_token: int = T5_END) -> torch.Tensor:
    """[B, T] ComfyUI's token mask: 1 up to and including the first end token, 0 after it."""
    is_end = (ids == end_token).to(torch.long)  # [B, T]
    seen_before = torch.cumsum(is_end, dim=-1) - is_end  # end tokens strictly before each position
    return (seen_before == 0).to(torch.long)


class T5TextEncoder(TowerOptions, nn.Module):
    """One T5 tower, ComfyUI's `T5XXLModel` surface (an `SDClipModel`) for our `TextEncoderSet`.

    `transformer` is transformers' `T5EncoderModel` without its tied `encoder.embed_tokens`
    (the table is `shared`, as in ComfyUI's state dicts). `enable_attention_masks` (use the
    token mask in attention) and `return_attention_masks` (return it) are ComfyUI's switches,
    both False for SD3 / Flux unless the loader's `t5_attention_mask` is set.
    """

    options: Any = None  # the set's EncoderOptions for this slot, else T5Options()
    zero_out_masked = False  # ComfyUI's SDClipModel switch: output states times the token mask

    def __init__(self, config: T5Config, transformer: nn.Module, attention_mask: bool = False) -> None:
        super().__init__()
        self.config = config
        self.transformer = transformer
        self.enable_attention_masks = attention_mask
        self.return_attention_masks = attention_mask
        self.options = self.default_options = T5Options()

    # --- ComfyUI's SDClipModel surface ---

    @property
    def special_tokens(self) -> dict[str, int]:
        return {"end": T5_END, "pad": int(getattr(self.options, "pad_token", T5_PAD))}

    @property
    def num_layers(self) -> int:
        return len(self.transformer.encoder.block)

    @property
    def width(self) -> int:
        return self.config.d_model

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
        the depth: the final output); CLIPSetLastLayer reaches T5 this way in ComfyUI too.
        `projected_pooled` is accepted (T5 has no pooled output). Lasts until `reset_clip_options`."""
        if "layer" in options:
            layer = options["layer"]
            layer_idx = None if layer is None or abs(layer) > self.num_layers else int(layer)
            self.options = replace(self.options, layer_idx=layer_idx)

    def token_embedding(self) -> nn.Module:
        """ComfyUI's `transformer.get_input_embeddings()` (a pack may have wrapped it)."""
        return self.transformer.get_input_embeddings()

    def load_sd(self, sd: Mapping[str, torch.Tensor]) -> Any:
        """ComfyUI's `load_sd`: copy `sd` (transformer-relative names, `shared.weight`,
        `encoder.block...`) into the weights, non-strict."""
        return self.transformer.load_state_dict(sd, strict=False)

    def forward(self, tokens: Any) -> tuple:
        """ComfyUI's `SDClipModel.forward(tokens)`: token rows (an id tensor [B, T], or lists of ids
        and embedding vectors) -> (states [B, T, d_model] float32, None), plus
        `{"attention_mask": [B, T]}` when `return_attention_masks`."""
        rows = tokens.tolist() if isinstance(tokens, torch.Tensor) else [list(row) for row in tokens]
        ids, overrides = chunks_to_ids(rows, self.width, mismatch_pad=self.special_tokens["pad"])
        mask = attention_mask_of(ids, T5_END)  # [B, T]
        hidden = self.encode_ids(ids, overrides, layer_idx=self.options.layer_idx,
                                 layer_norm_hidden=self.options.layer_norm_hidden,
                                 attention_mask=mask if self.enable_attention_masks else None)
        if self.zero_out_masked:
            hidden = hidden * mask.to(device=hidden.device, dtype=hidden.dtype).unsqueeze(-1)  # [B, T, W]
        if self.return_attention_masks:
            return hidden, None, {"attention_mask": mask.to(hidden.device)}
        return hidden, None

    def encode(self, tokens: Any) -> tuple:
        return self(tokens)

    def encode_token_weights(self, token_weight_pairs: Sequence[Sequence[Any]]) -> tuple:
        """ComfyUI's `ClipTokenWeightEncoder.encode_token_weights`: (token, weight) chunks ->
        (cond [1, n*T, d_model] float32, None[, {"attention_mask": [1, n*T]}]).

        When some weight is not 1, an empty prompt (end token, then pad tokens up to the longest
        chunk) is encoded in the same batch and each weighted token becomes
        `z_empty + (z - z_empty) * w`, position by position.
        """
        rows = [[pair[0] for pair in chunk] for chunk in token_weight_pairs]
        weights = [[float(pair[1]) for pair in chunk] for chunk in token_weight_pairs]
        has_weights = any(w != 1.0 for row in weights for w in row)
        sections = len(rows)
        to_encode = list(rows)
        if has_weights or sections == 0:
            longest = max((len(r) for r in rows), default=0)
            to_encode.append(self.empty_tokens(longest))
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
            mask = out[2]["attention_mask"]
            return cond, None, {"attention_mask": mask[:sections].flatten().unsqueeze(0)}
        return cond, None

    def empty_tokens(self, length: int) -> list[int]:
        """ComfyUI's `gen_empty_tokens` for T5: the end token, then pad tokens up to `length`."""
        return [T5_END] + [self.special_tokens["pad"]] * max(0, length - 1)

    # --- the forward pass ---

    def encode_ids(self, ids: torch.Tensor, overrides: Sequence[EmbeddingOverride] = (),
                   layer_idx: int | None = None, layer_norm_hidden: bool = True,
                   attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """ids [B, T] -> the selected states [B, T, d_model] float32.

        `layer_idx`: None for the final layer-normed output, else block `layer_idx`'s output
        (negative counts from the end), through the final norm when `layer_norm_hidden`.
        `attention_mask` [B, T] (1 attend): masks keys, else every position is attended.
        """
        if ids.dim() != 2:
            raise TokenizeError(f"t5: token ids must be [batch, tokens], got shape {tuple(ids.shape)}")
        embedding = self.token_embedding()
        ids = ids.to(device=embedding.weight.device, dtype=torch.long)
        x = embedding(ids, out_dtype=torch.float32)  # [B, T, W]
        if embedding.weight.dtype in FP8_DTYPES:
            x = torch.nan_to_num(x)  # as ComfyUI: fp8 tables can hold NaN codes
        if overrides:
            x = _apply_overrides(x, overrides)
        encoder = self.transformer.encoder
        padding = None if attention_mask is None else key_padding_bias(attention_mask.to(x.device))  # [B, 1, 1, T]
        bias = None
        target = resolve_layer(layer_idx, self.num_layers)
        hidden = None
        for index, block in enumerate(encoder.block):
            if bias is None or self.config.relative_attention_per_block:
                bias = self._position_bias(block, ids.shape[1], padding)  # [B or 1, H, T, T]
            x = self._block(block, x, bias)
            if index == target:
                hidden = x
        final = compute_in_float32(encoder.final_layer_norm, x)
        if hidden is None:
            return final.float()
        if layer_norm_hidden:
            hidden = compute_in_float32(encoder.final_layer_norm, hidden)
        return hidden.float()

    def _position_bias(self, block: nn.Module, length: int, padding: torch.Tensor | None) -> torch.Tensor:
        """The block's relative-position table as an additive bias, plus the key padding bias."""
        table = block.layer[0].SelfAttention.relative_attention_bias.weight
        bias = position_bias(table, length, self.config.relative_attention_max_distance)  # [1, H, T, T]
        return bias if padding is None else bias + padding.to(bias.device)

    def _block(self, block: nn.Module, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """One pre-norm T5 block: x + attention(norm(x)), then x + feed_forward(norm(x))."""
        attention_layer, ff_layer = block.layer[0], block.layer[-1]
        attention = attention_layer.SelfAttention
        heads = self.config.num_heads
        normed = compute_in_float32(attention_layer.layer_norm, x)  # [B, T, W]
        q = compute_in_float32(attention.q, normed)  # [B, T, H*d]
        k = compute_in_float32(attention.k, normed)
        v = compute_in_float32(attention.v, normed)
        # T5 does not scale scores by 1/sqrt(d): scaling k by sqrt(d) cancels the kernel's scaling.
        out = attention_in_force(q, k * math.sqrt(self.config.d_kv), v, heads, mask=bias)  # [B, T, H*d]
        x = x + compute_in_float32(attention.o, out)
        normed = compute_in_float32(ff_layer.layer_norm, x)
        dense = ff_layer.DenseReluDense
        if self.config.gated:
            gate = F.gelu(compute_in_float32(dense.wi_0, normed), approximate="tanh")  # [B, T, d_ff]
            inner = gate * compute_in_float32(dense.wi_1, normed)
        else:
            inner = F.relu(compute_in_float32(dense.wi, normed))
        return x + compute_in_float32(dense.wo, inner)


def _apply_overrides(embeds: torch.Tensor, overrides: Sequence[EmbeddingOverride]) -> torch.Tensor:
    """Input embeddings [B, T, W] with the given positions replaced by embedding vectors."""
    embeds = embeds.clone()
    batch, length, width = embeds.shape
    for override in overrides:
        vectors = override.vectors if override.vectors.dim() == 2 else override.vectors[None]
        end = override.position + vectors.shape[0]
        if vectors.shape[-1] != width or not (0 <= override.row < batch) or override.position < 0 or end > length:
            raise TokenizeError(f"t5: embedding override {tuple(vectors.shape)} at row {override.row}, positions "
                                f"{override.position}..{end - 1} does not fit the [{batch}, {length}, {width}] input")
        embeds[override.row, override.position:end] = vectors.to(device=embeds.device, dtype=embeds.dtype)
    return embeds


# Keys a T5 file may carry that the encoder does not use: the tied copy of the token table,
# ComfyUI's scaled-fp8 marker, and a full encoder-decoder's decoder and LM head.
_IGNORED_KEYS = ("encoder.embed_tokens.weight", "scaled_fp8", "lm_head.weight", "logit_scale")
_IGNORED_SUBTREES = ("decoder.",)


def t5_state_dict(config: T5Config, state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The file's tensors under `config.prefix` -> `T5EncoderModel` names (`shared.weight`,
    `encoder...`). Unknown keys under the prefix are a `T5KeyError`, never dropped silently."""
    prefix = config.prefix
    out: dict[str, torch.Tensor] = {}
    for key, tensor in state_dict.items():
        if not key.startswith(prefix):
            continue
        name = key[len(prefix):]
        if name == config.embedding_key:
            out["shared.weight"] = tensor
        elif name in _IGNORED_KEYS or name.startswith(_IGNORED_SUBTREES):
            continue
        elif name.endswith((".scale_weight", ".scale_input")):
            if not config.scaled_fp8:
                raise T5KeyError(f"T5 key {key!r}: a scaled-fp8 scale in a file without the scaled_fp8 marker")
            continue  # read by `weight_scales`
        elif name.startswith("encoder."):
            out[name] = tensor
        elif prefix:
            raise T5KeyError(f"T5 key {key!r} is not part of a T5 encoder")
    return out


def weight_scales(config: T5Config, state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """ComfyUI's scaled-fp8 T5 files: `{T5EncoderModel weight name: its scale_weight}` (the true
    weight is the stored fp8 value times the scale; `scale_input` only serves fp8 matrix products)."""
    prefix, suffix = config.prefix, ".scale_weight"
    return {key[len(prefix):-len(suffix)] + ".weight": tensor for key, tensor in state_dict.items()
            if key.startswith(prefix) and key.endswith(suffix)}


def _keep_scaled_fp8(config: T5Config, transformer: nn.Module, state_dict: Mapping[str, torch.Tensor],
                     scales: Mapping[str, torch.Tensor]) -> None:
    """The linear layers as `ScaledFp8Linear`s (fp8 weight, float32 `scale_weight`, 1 where the
    file has none; the marker's fp8 dtype), no fp8 matrix products (ComfyUI's text encoders). A
    scale on another layer (a relative-attention table) is applied once, into float32: ComfyUI's
    scaled layers are linear ones only, and these tables are small."""
    from comfy_core.models.storage_cast import SCALE_WEIGHT, SCALED_FP8_MARKER, keep_scaled_fp8

    found: dict[str, torch.Tensor] = {}
    for name, scale in scales.items():
        layer = transformer.get_submodule(name[:-len(".weight")])
        if isinstance(layer, nn.Linear):
            found[name[:-len("weight")] + SCALE_WEIGHT] = scale
        else:
            layer.weight = nn.Parameter(layer.weight.float() * scale.float(), requires_grad=False)
    marker = config.prefix + SCALED_FP8_MARKER
    if marker in state_dict:
        found[SCALED_FP8_MARKER] = state_dict[marker]
    keep_scaled_fp8(transformer, found, found.__getitem__, "", fp8_matrix_mult=False)


def build_t5_encoder(config: T5Config, state_dict: Mapping[str, torch.Tensor],
                     dtype: torch.dtype | None = None, attention_mask: bool = False,
                     encoder_class: type[T5TextEncoder] = T5TextEncoder) -> T5TextEncoder:
    """Build on the meta device, then load the file's tensors with `assign=True`.

    `dtype`: the storage dtype (computation is float32 anyway); None keeps each tensor as the
    file stores it (fp8 stays fp8, cast per layer as it runs). Tensors already in `dtype` are
    used as they are (mmap views stay views). `attention_mask`: ComfyUI's `t5_attention_mask`.
    `encoder_class`: the tower class (UMT5's `UMT5XXlModel` sets ComfyUI's switches for Wan).
    """
    from transformers import T5EncoderModel, UMT5EncoderModel

    # Scaled fp8 (t5xxl_fp8_e4m3fn_scaled, umt5_xxl_fp8_e4m3fn_scaled): the linear layers keep
    # their fp8 weights and scales, the scale applied in each call's cast (ComfyUI's scaled_fp8_ops).
    scales = weight_scales(config, state_dict) if config.scaled_fp8 else {}
    model_class = UMT5EncoderModel if config.relative_attention_per_block else T5EncoderModel
    with meta_build():
        transformer = model_class(config.to_transformers())
    # The encoder's tied copy of the table is not ours to hold: `shared` is the table (ComfyUI's names).
    transformer.encoder.embed_tokens = None
    transformer.shared.__class__ = TokenEmbedding  # ComfyUI's embedding(ids, out_dtype) convention
    expected = transformer.state_dict()
    converted = t5_state_dict(config, state_dict)
    missing = sorted(set(expected) - set(converted))
    if missing:
        raise T5KeyError(f"T5 encoder (prefix {config.prefix!r}) is missing keys: "
                         f"{[config.prefix + m for m in missing[:5]]}{' ...' if len(missing) > 5 else ''}")
    loaded: dict[str, torch.Tensor] = {}
    for name, tensor in converted.items():
        if name not in expected:
            raise T5KeyError(f"T5 key {config.prefix + name!r} is not a parameter of this "
                             f"{config.num_layers}-block encoder")
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise T5KeyError(f"T5 key {config.prefix + name!r}: expected shape {tuple(expected[name].shape)}, "
                             f"got {tuple(tensor.shape)}")
        if name in scales:
            loaded[name] = tensor  # as stored (fp8); `keep_scaled_fp8` below gives the layer its scale
            continue
        loaded[name] = tensor if dtype is None or tensor.dtype == dtype else tensor.to(dtype)
    transformer.load_state_dict(loaded, strict=True, assign=True)
    if config.scaled_fp8:
        _keep_scaled_fp8(config, transformer, state_dict, scales)
    transformer.eval()
    transformer.requires_grad_(False)
    return encoder_class(config, transformer, attention_mask=attention_mask)
