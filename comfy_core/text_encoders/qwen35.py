"""The Qwen3.5 language model (Qwen Team 2026) as a text encoder and TextGenerate tower, as today's
ComfyUI's `comfy/text_encoders/qwen35.py` runs it (`Qwen35`, `Qwen35ClipModel`, `Qwen35TEModel`,
`Qwen35ImageTokenizer`); transformers' `models/qwen3_5` is the reference for the maths.

A hybrid decoder: most blocks mix tokens with a Gated DeltaNet (linear attention,
`gated_delta.py`), every fourth (in the published models; read from the file here) with gated
full attention. Every block is pre-norm: RMSNorm, the mixer, residual; RMSNorm, SwiGLU, residual.
Qwen3.5's RMSNorms scale by `1 + weight` (zero-centred weights), except the gated norm of the
DeltaNet output, which scales by `weight`.

- Linear attention (`linear_attn`): `in_proj_qkv` -> causal depthwise conv (`conv1d`, kernel 4) +
  SiLU -> q, k [H_k heads of D_k], v [H_v heads of D_v]; q and k repeated to the H_v value heads and
  L2-normalised; `beta = sigmoid(in_proj_b x)`, `g = -exp(A_log) * softplus(in_proj_a x + dt_bias)`;
  the gated delta rule; per head RMSNorm(out) * weight * silu(in_proj_z x); `out_proj`.
- Full attention (`self_attn`): `q_proj` gives per head the query and an output gate (2 x D);
  per-head RMSNorm of q and k; RoPE (rotate-half, theta 1e7) on the first quarter of each head's
  dims (`partial_rotary_factor` 0.25), M-RoPE with interleaved sections when the prompt holds images
  (`qwen35_vision.interleaved_tables`; text positions are equal on the three axes, plain RoPE);
  grouped-query attention; the output times `sigmoid(gate)`; `o_proj`.

Files: Comfy-Org's `qwen3.5_*_bf16.safetensors` hold transformers' `Qwen3_5ForConditionalGeneration`
names: the language model under `model.language_model.` (ComfyUI renames it `model.`), the vision
tower under `model.visual.`, the 9B / 27B's untied `lm_head.weight`. ComfyUI's `detect_te_model`
sees `model.language_model.layers.0.linear_attn.A_log` and names the model by the width of
`input_layernorm` (1024: `qwen35_08b`, 2560: 4B, 4096: 9B, 5120: 27B, any other: `qwen35_2b`); a
single Qwen3.5 file becomes this encoder whatever the CLIPLoader type (stable_diffusion, qwen_image,
flux3, ...). A file already renamed (`model.layers...`, `visual.`, `model.lm_head.`) reads the
same. The shapes give the sizes; what they cannot give is the published configuration (RMS epsilon
1e-6, rope theta 1e7, rotary quarter) and the key head width, taken equal to the value head width
(the gated norm's), as in every published size (128). Weights may be bf16 / fp16 / fp32, float8,
or ComfyUI's per-layer quantised formats (`comfy_quant` / `_quantization_metadata`: `float8_*`,
`int8_tensorwise` with or without ConvRot, the int4 `asym_w4a8_int8` of Flux 3's
`*_prompt_upsampler_w4a8` file, ...; `comfy_core/weights/quant_registry.py`), kept as stored and
computed in float32 one layer at a time. The other int4 formats (`convrot_w4a4`, `awq_w4a16`) are
refused by name (`QuantFormatError`). Loading is `qwen35_load.py`'s; the vision tower (`visual.*`, Qwen3-VL's
without DeepStack) `qwen35_vision.py`'s; an MTP draft head (`mtp.*`) is not read (logged; the
node's `mtp` has no effect, as ComfyUI documents it without MTP weights).

The encoder (ComfyUI's `Qwen35ClipModel`, an SDClipModel): layer "hidden" -2 without the final
norm, pad `<|endoftext|>` 248044, attention masks used and returned; the mask reaches the
full-attention layers only (ComfyUI's DeltaNet ignores it). Generation (`generate.generate_tokens`):
full-attention keys and values in a `HybridCache`, each DeltaNet layer's conv inputs and state
matrices carried as its recurrent state; a prompt with images (`prompt_inputs`: the vision tower's
tokens at each image entry, Qwen2-VL's M-RoPE positions) decodes on from its largest position plus
one; stop tokens 248044 and `<|im_end|>` 248046; the LM head is the file's `lm_head` when it has
one, else the token table (tied, 0.8B-4B). Sampling is the shared loop's (seeded, ComfyUI's order).

The tokenizer, its vocabulary (Qwen3.5's own, not shipped here) and the encoder set are
`qwen35_tokenizer.py`'s.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.models.float32_compute import compute_in_float32
from comfy_core.text_encoders.decoder_llm import (FP8_DTYPES, apply_overrides, attention_bias, embed_tokens,
                                                  grouped_attention, shape_of)
from comfy_core.text_encoders.encoder import TokenEmbedding, resolve_layer
from comfy_core.text_encoders.errors import Qwen35DetectionError, TextEncoderError, TextEncoderKeyError
from comfy_core.text_encoders.gated_delta import causal_conv, gated_delta_rule, l2_normalize
from comfy_core.text_encoders.generate import GenerationError, HybridCache
from comfy_core.text_encoders.qwen3 import Qwen3Options, Qwen3TextEncoder, Qwen3Transformer
from comfy_core.text_encoders.token_chunks import EmbeddingOverride, chunks_to_ids


ENDOFTEXT_ID = 248044  # <|endoftext|>, ComfyUI's pad token for Qwen3.5
IM_START_ID = 248045
IM_END_ID = 248046
IMAGE_PAD_ID = 248056
STOP_TOKENS = (ENDOFTEXT_ID, IM_END_ID)  # ComfyUI's Qwen35Config.stop_tokens
MARKER = "layers.0.linear_attn.A_log"
ROOTS = ("model.language_model.", "model.")  # the file's layout, ComfyUI's renamed one
# ComfyUI's model types by width (`detect_te_model`); any other width is its default, the 2B.
SLOTS_BY_WIDTH = {1024: "qwen35_08b", 2560: "qwen35_4b", 4096: "qwen35_9b", 5120: "qwen35_27b"}
DEFAULT_SLOT = "qwen35_2b"
SLOT_NAMES = {"qwen35_08b": "Qwen3.5-0.8B", "qwen35_2b": "Qwen3.5-2B", "qwen35_4b": "Qwen3.5-4B",
              "qwen35_9b": "Qwen3.5-9B", "qwen35_27b": "Qwen3.5-27B"}
LOGIT_ROWS = 16384
TOKENIZER_KEY = "qwen35_tokenizer"  # tokenizer_data key, and the folder name ComfyUI ships
LLAMA_TEMPLATE = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
NO_THINKING = "<think>\n</think>\n"


class Qwen35KeyError(TextEncoderKeyError, ValueError):
    """A Qwen3.5 state-dict key is missing, unknown or of the wrong shape."""


class Qwen35TokenizerMissingError(TextEncoderError, FileNotFoundError):
    """No Qwen3.5 vocabulary: this repository does not ship it (see the module doc)."""


# --- configuration --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Qwen35Config:
    """One Qwen3.5 language model: where its keys are and how it is shaped (see the module doc)."""

    prefix: str  # before the root ("" for text-encoder files)
    root: str  # "model.language_model." (the file's layout) or "model." (ComfyUI's renamed one)
    hidden_size: int
    intermediate_size: int
    num_layers: int
    layer_types: tuple[str, ...]  # "linear_attention" | "full_attention" per block
    num_heads: int
    num_kv_heads: int
    head_dim: int
    linear_key_heads: int
    linear_value_heads: int
    linear_key_dim: int
    linear_value_dim: int
    conv_kernel: int
    vocab_size: int
    lm_head: bool
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10_000_000.0
    partial_rotary_factor: float = 0.25
    dtype: str = "F32"
    slot: str = DEFAULT_SLOT
    vision: Any = None  # the vision tower's `qwen3vl_vision.Qwen3VLVisionConfig` (no DeepStack), None without one

    @property
    def visual_prefix(self) -> str:
        """Where the file keeps the vision tower."""
        return self.prefix + ("model.visual." if self.root == "model.language_model." else "visual.")

    @property
    def width(self) -> int:
        return self.hidden_size

    @property
    def layers(self) -> int:
        return self.num_layers

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def head_key(self) -> str:
        """The file's name of the untied LM head."""
        return self.prefix + ("lm_head.weight" if self.root == "model.language_model." else "model.lm_head.weight")

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "Qwen35Config | None":
        """The config of the Qwen3.5 model under `prefix` (names and shapes only), None when there is none."""
        root = next((r for r in ROOTS if prefix + r + MARKER in tensors), None)
        if root is None:
            return None
        model = prefix + root

        def shape(key: str, ndim: int) -> tuple[int, ...]:
            return shape_of(tensors, model + key, ndim, Qwen35DetectionError, "Qwen3.5")

        vocab, hidden = shape("embed_tokens.weight", 2)
        intermediate, _ = shape("layers.0.mlp.gate_proj.weight", 2)
        layers = sorted({int(name[len(model) + 7:].split(".", 1)[0]) for name in tensors
                         if name.startswith(model + "layers.") and name[len(model) + 7:].split(".", 1)[0].isdigit()})
        if layers != list(range(len(layers))):
            raise Qwen35DetectionError(f"{model}layers: block indices {layers} are not 0..{len(layers) - 1}")
        kinds = []
        for index in layers:
            linear = f"{model}layers.{index}.linear_attn.A_log" in tensors
            full = f"{model}layers.{index}.self_attn.q_proj.weight" in tensors
            if linear == full:
                raise Qwen35DetectionError(f"{model}layers.{index}: expected exactly one of linear_attn / self_attn")
            kinds.append("linear_attention" if linear else "full_attention")
        if "full_attention" not in kinds:
            raise Qwen35DetectionError(f"{model}layers: no full-attention block (self_attn)")
        first_full = kinds.index("full_attention")
        attn = f"layers.{first_full}.self_attn."
        (head_dim,) = shape(attn + "q_norm.weight", 1)
        q_out, _ = shape(attn + "q_proj.weight", 2)
        k_out, _ = shape(attn + "k_proj.weight", 2)
        if q_out % (2 * head_dim) or k_out % head_dim or (q_out // (2 * head_dim)) % max(k_out // head_dim, 1):
            raise Qwen35DetectionError(f"{model}{attn}q_proj / k_proj: {q_out} / {k_out} outputs do not split into "
                                       f"gated query heads and key heads of {head_dim}")
        lin = "layers.0.linear_attn."
        (value_heads,) = shape(lin + "A_log", 1)
        (value_dim,) = shape(lin + "norm.weight", 1)
        qkv, _ = shape(lin + "in_proj_qkv.weight", 2)
        conv_channels, _, kernel = shape(lin + "conv1d.weight", 3)
        key_total = (qkv - value_heads * value_dim) // 2
        if qkv != conv_channels or key_total <= 0 or key_total % value_dim or value_heads % (key_total // value_dim):
            raise Qwen35DetectionError(f"{model}{lin}in_proj_qkv: {qkv} outputs do not split into query / key heads "
                                       f"of {value_dim} and {value_heads} value heads of {value_dim}")
        config = cls(prefix=prefix, root=root, hidden_size=hidden, intermediate_size=intermediate,
                     num_layers=len(layers), layer_types=tuple(kinds), num_heads=q_out // (2 * head_dim),
                     num_kv_heads=k_out // head_dim, head_dim=head_dim, linear_key_heads=key_total // value_dim,
                     linear_value_heads=value_heads, linear_key_dim=value_dim, linear_value_dim=value_dim,
                     conv_kernel=kernel, vocab_size=vocab,
                     lm_head=(prefix + ("lm_head.weight" if root == "model.language_model." else "model.lm_head.weight"))
                     in tensors,
                     dtype=str(getattr(tensors.get(model + "norm.weight"), "dtype", "F32")),
                     slot=SLOTS_BY_WIDTH.get(hidden, DEFAULT_SLOT))
        from comfy_core.text_encoders.qwen35_vision import detect_vision

        config = replace(config, vision=detect_vision(tensors, config.visual_prefix, hidden))
        expected = {"norm.weight": (hidden,)}
        for index in layers:
            expected.update(config.block_shapes(index))
        for name, wanted in expected.items():
            found = shape(name, len(wanted))
            if found != wanted:
                raise Qwen35DetectionError(f"Qwen3.5 key {model + name!r}: expected shape {wanted}, got {found}")
        if config.lm_head:
            head = shape_of(tensors, config.head_key, 2, Qwen35DetectionError, "Qwen3.5")
            if head != (vocab, hidden):
                raise Qwen35DetectionError(f"Qwen3.5 key {config.head_key!r}: expected shape {(vocab, hidden)}, "
                                           f"got {head}")
        return config

    def block_shapes(self, index: int) -> dict[str, tuple[int, ...]]:
        """Name (relative to the root) -> shape of every weight of block `index`."""
        base = f"layers.{index}."
        h, f = self.hidden_size, self.intermediate_size
        shapes = {base + "input_layernorm.weight": (h,), base + "post_attention_layernorm.weight": (h,),
                  base + "mlp.gate_proj.weight": (f, h), base + "mlp.up_proj.weight": (f, h),
                  base + "mlp.down_proj.weight": (h, f)}
        if self.layer_types[index] == "linear_attention":
            a = base + "linear_attn."
            key, value = self.linear_key_heads * self.linear_key_dim, self.linear_value_heads * self.linear_value_dim
            conv = 2 * key + value
            shapes.update({a + "in_proj_qkv.weight": (conv, h), a + "in_proj_z.weight": (value, h),
                           a + "in_proj_b.weight": (self.linear_value_heads, h),
                           a + "in_proj_a.weight": (self.linear_value_heads, h),
                           a + "out_proj.weight": (h, value), a + "dt_bias": (self.linear_value_heads,),
                           a + "A_log": (self.linear_value_heads,), a + "conv1d.weight": (conv, 1, self.conv_kernel),
                           a + "norm.weight": (self.linear_value_dim,)})
        else:
            a = base + "self_attn."
            inner, kv = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
            shapes.update({a + "q_proj.weight": (2 * inner, h), a + "k_proj.weight": (kv, h),
                           a + "v_proj.weight": (kv, h), a + "o_proj.weight": (h, inner),
                           a + "q_norm.weight": (self.head_dim,), a + "k_norm.weight": (self.head_dim,)})
        return shapes

    def to_transformers(self) -> Any:
        """transformers' `Qwen3_5TextConfig` of this shape (for comparisons)."""
        from transformers import Qwen3_5TextConfig

        config = Qwen3_5TextConfig(
            vocab_size=self.vocab_size, hidden_size=self.hidden_size, intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_layers, num_attention_heads=self.num_heads,
            num_key_value_heads=self.num_kv_heads, head_dim=self.head_dim,
            linear_num_key_heads=self.linear_key_heads, linear_num_value_heads=self.linear_value_heads,
            linear_key_head_dim=self.linear_key_dim, linear_value_head_dim=self.linear_value_dim,
            linear_conv_kernel_dim=self.conv_kernel, layer_types=list(self.layer_types),
            rms_norm_eps=self.rms_norm_eps, tie_word_embeddings=not self.lm_head,
            rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta,
                             "partial_rotary_factor": self.partial_rotary_factor, "mrope_section": [11, 11, 10]})
        config._attn_implementation = "sdpa"
        return config


def holds_qwen35(tensors: Mapping[str, Any]) -> bool:
    """Whether a file's names are a Qwen3.5 model's (ComfyUI's `detect_te_model` marker)."""
    return any(root + MARKER in tensors for root in ROOTS)


# --- the modules (ComfyUI's names; the forward pass is the encoder's) ----------------------------

class ZeroCenteredRMSNorm(nn.Module):
    """Qwen3.5's RMSNorm: x / rms(x) * (1 + weight), in float32."""

    def __init__(self, width: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(width))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float()
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1.0 + self.weight.float())


class GatedRMSNorm(nn.Module):
    """The DeltaNet output norm: x / rms(x) * weight * silu(gate), in float32."""

    def __init__(self, width: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.float()
        return x * F.silu(gate.float())


def _linear(width_in: int, width_out: int) -> nn.Linear:
    return nn.Linear(width_in, width_out, bias=False)


class GatedDeltaNet(nn.Module):
    """ComfyUI's `GatedDeltaNet` parameters (`linear_attn`)."""

    def __init__(self, c: Qwen35Config) -> None:
        super().__init__()
        key, value = c.linear_key_heads * c.linear_key_dim, c.linear_value_heads * c.linear_value_dim
        conv = 2 * key + value
        self.in_proj_qkv = _linear(c.hidden_size, conv)
        self.in_proj_z = _linear(c.hidden_size, value)
        self.in_proj_b = _linear(c.hidden_size, c.linear_value_heads)
        self.in_proj_a = _linear(c.hidden_size, c.linear_value_heads)
        self.out_proj = _linear(value, c.hidden_size)
        self.dt_bias = nn.Parameter(torch.ones(c.linear_value_heads))
        self.A_log = nn.Parameter(torch.zeros(c.linear_value_heads))
        self.conv1d = nn.Conv1d(conv, conv, c.conv_kernel, groups=conv, bias=False, padding=c.conv_kernel - 1)
        self.norm = GatedRMSNorm(c.linear_value_dim, c.rms_norm_eps)


class GatedAttention(nn.Module):
    """ComfyUI's `GatedAttention` parameters (`self_attn`)."""

    def __init__(self, c: Qwen35Config) -> None:
        super().__init__()
        inner, kv = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
        self.q_proj = _linear(c.hidden_size, 2 * inner)
        self.k_proj = _linear(c.hidden_size, kv)
        self.v_proj = _linear(c.hidden_size, kv)
        self.o_proj = _linear(inner, c.hidden_size)
        self.q_norm = ZeroCenteredRMSNorm(c.head_dim, c.rms_norm_eps)
        self.k_norm = ZeroCenteredRMSNorm(c.head_dim, c.rms_norm_eps)


class SwiGLU(nn.Module):
    def __init__(self, c: Qwen35Config) -> None:
        super().__init__()
        self.gate_proj = _linear(c.hidden_size, c.intermediate_size)
        self.up_proj = _linear(c.hidden_size, c.intermediate_size)
        self.down_proj = _linear(c.intermediate_size, c.hidden_size)


class Qwen35Block(nn.Module):
    """ComfyUI's `Qwen35TransformerBlock`: `linear_attn` or `self_attn`, `mlp` and two norms."""

    def __init__(self, c: Qwen35Config, index: int) -> None:
        super().__init__()
        self.layer_type = c.layer_types[index]
        if self.layer_type == "linear_attention":
            self.linear_attn = GatedDeltaNet(c)
        else:
            self.self_attn = GatedAttention(c)
        self.mlp = SwiGLU(c)
        self.input_layernorm = ZeroCenteredRMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = ZeroCenteredRMSNorm(c.hidden_size, c.rms_norm_eps)


class Qwen35Model(nn.Module):
    """ComfyUI's `Qwen35Transformer`: `embed_tokens`, `layers`, `norm`, optional `lm_head`."""

    def __init__(self, c: Qwen35Config) -> None:
        super().__init__()
        self.embed_tokens = TokenEmbedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(Qwen35Block(c, i) for i in range(c.num_layers))
        self.norm = ZeroCenteredRMSNorm(c.hidden_size, c.rms_norm_eps)
        if c.lm_head:
            self.lm_head = _linear(c.hidden_size, c.vocab_size)


# --- the forward pass -----------------------------------------------------------------------------

def run_linear(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A linear layer in float32: quantised layers (`QuantizedLinear`) dequantise themselves,
    others have their weights cast for the call."""
    from comfy_core.models.quant_linear import QuantizedLinear

    if isinstance(module, QuantizedLinear):
        return module(x.float()).float()
    return compute_in_float32(module, x.float()).float()


def partial_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, T, H, d]: its first `cos.shape[-1]` dims rotated (rotate-half RoPE), the rest as is."""
    rot = cos.shape[-1]
    head, rest = x[..., :rot], x[..., rot:]
    half = rot // 2
    rotated = torch.cat((-head[..., half:], head[..., :half]), dim=-1)
    head = head * cos[None, :, None, :] + rotated * sin[None, :, None, :]
    return torch.cat((head, rest), dim=-1)


def rotary_at(positions: torch.Tensor, rotary_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [T, rotary_dim] float32 at the given positions [T]."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, device=positions.device, dtype=torch.float32)
                                / rotary_dim))
    angles = positions.float()[:, None] * inv_freq[None, :]
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


class Qwen35Transformer(Qwen3Transformer):
    """ComfyUI's `Qwen35` wrapper: the decoder as `model`; the LM head is `model.lm_head` when the
    file has one, else the token table."""

    def __init__(self, model: nn.Module, visual: nn.Module | None = None) -> None:
        super().__init__(model)
        self.visual = visual

    def output_layer(self) -> nn.Module:
        head = getattr(self.model, "lm_head", None)
        return head if head is not None else self.model.embed_tokens

    def output_weight(self) -> torch.Tensor:
        return self.output_layer().weight


class Qwen35TextEncoder(Qwen3TextEncoder):
    """One Qwen3.5 tower: ComfyUI's `Qwen35ClipModel` surface (an SDClipModel) and the generation
    surface of `generate.py` (see the module doc). The SDClipModel parts (token rows, masks, prompt
    weights, clip options) are the Qwen3 tower's."""

    can_generate = True
    stop_tokens = STOP_TOKENS
    @property
    def generation_media(self) -> tuple[str, ...]:
        """What TextGenerate may give this tower besides text: images when the file has a vision tower."""
        return ("image",) if self.transformer.visual is not None else ()

    def __init__(self, config: Qwen35Config, transformer: Qwen35Transformer) -> None:
        super().__init__(config, transformer)  # type: ignore[arg-type]
        self.options = self.default_options = Qwen3Options(slot=config.slot, token_key=config.slot,
                                                           pad_token=ENDOFTEXT_ID)

    @property
    def special_tokens(self) -> dict[str, int]:
        return {"pad": int(getattr(self.options, "pad_token", ENDOFTEXT_ID))}

    # --- encoding ---

    def encode_ids(self, ids: torch.Tensor, overrides: Sequence[EmbeddingOverride] = (),
                   layer_idx: int | None = -2, layer_norm_hidden: bool = False,
                   attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """ids [B, T] -> the selected states [B, T, W] float32 (as `Qwen3TextEncoder.encode_ids`;
        the token mask reaches the full-attention layers only)."""
        if ids.dim() != 2:
            raise Qwen35KeyError(f"qwen3.5: token ids must be [batch, tokens], got shape {tuple(ids.shape)}")
        x = self.embed_ids(ids)
        if overrides:
            x = apply_overrides(x, overrides, "qwen3.5")
        length = ids.shape[1]
        cos, sin = rotary_at(torch.arange(length, device=x.device), self.config.rotary_dim, self.config.rope_theta)
        bias = attention_bias(attention_mask, length, x.device)
        model = self.transformer.model
        target = resolve_layer(layer_idx, self.num_layers)
        for index, block in enumerate(model.layers):
            x = self._block(block, x, cos, sin, bias, None, index)
            if index == target:
                return (compute_in_float32(model.norm, x) if layer_norm_hidden else x).float()
        return compute_in_float32(model.norm, x).float()

    def _block(self, block: nn.Module, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, bias: torch.Tensor,
               cache: HybridCache | None = None, layer: int = 0) -> torch.Tensor:
        """One block (see the module doc); with a cache, keys / values or the recurrent state of
        block `layer` are read and updated."""
        normed = compute_in_float32(block.input_layernorm, x)
        if block.layer_type == "linear_attention":
            mixed = self._linear_attention(block.linear_attn, normed, cache, layer)
        else:
            mixed = self._full_attention(block.self_attn, normed, cos, sin, bias, cache, layer)
        x = x + mixed
        normed = compute_in_float32(block.post_attention_layernorm, x)
        mlp = block.mlp
        inner = F.silu(run_linear(mlp.gate_proj, normed)) * run_linear(mlp.up_proj, normed)
        return x + run_linear(mlp.down_proj, inner)

    def _full_attention(self, attn: nn.Module, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                        bias: torch.Tensor, cache: HybridCache | None, layer: int) -> torch.Tensor:
        c = self.config
        batch, length, _ = x.shape
        qg = run_linear(attn.q_proj, x).view(batch, length, c.num_heads, 2 * c.head_dim)
        q, gate = qg[..., :c.head_dim], qg[..., c.head_dim:].reshape(batch, length, -1)  # gate [B, T, H*d]
        k = run_linear(attn.k_proj, x).view(batch, length, c.num_kv_heads, c.head_dim)
        v = run_linear(attn.v_proj, x).view(batch, length, c.num_kv_heads, c.head_dim)
        q, k = compute_in_float32(attn.q_norm, q), compute_in_float32(attn.k_norm, k)
        q, k = partial_rotary(q, cos, sin), partial_rotary(k, cos, sin)
        if cache is not None:
            k, v = cache.update(layer, k, v)  # [B, S, KV, d]
        out = grouped_attention(q, k, v, c.num_heads, bias)  # [B, T, H*d]
        return run_linear(attn.o_proj, out * torch.sigmoid(gate))

    def _linear_attention(self, attn: nn.Module, x: torch.Tensor, cache: HybridCache | None,
                          layer: int) -> torch.Tensor:
        c = self.config
        batch, length, _ = x.shape
        conv_state = cache.conv[layer] if cache is not None else None
        mixed, conv_state = causal_conv(run_linear(attn.in_proj_qkv, x), attn.conv1d.weight, conv_state)
        key = c.linear_key_heads * c.linear_key_dim
        q, k, v = mixed.split([key, key, c.linear_value_heads * c.linear_value_dim], dim=-1)
        q = q.reshape(batch, length, c.linear_key_heads, c.linear_key_dim)
        k = k.reshape(batch, length, c.linear_key_heads, c.linear_key_dim)
        v = v.reshape(batch, length, c.linear_value_heads, c.linear_value_dim)
        repeat = c.linear_value_heads // c.linear_key_heads
        if repeat > 1:  # each query / key head serves `repeat` consecutive value heads
            q, k = q.repeat_interleave(repeat, dim=2), k.repeat_interleave(repeat, dim=2)
        beta = torch.sigmoid(run_linear(attn.in_proj_b, x))  # [B, T, Hv]
        decay = -attn.A_log.float().exp()
        g = decay * F.softplus(run_linear(attn.in_proj_a, x) + attn.dt_bias.float())
        state = cache.recurrent[layer] if cache is not None else None
        out, state = gated_delta_rule(l2_normalize(q), l2_normalize(k), v, g, beta, state)
        if cache is not None:
            cache.conv[layer], cache.recurrent[layer] = conv_state, state
        z = run_linear(attn.in_proj_z, x).view(batch, length, c.linear_value_heads, c.linear_value_dim)
        out = compute_in_float32(attn.norm, out, z).reshape(batch, length, -1)
        return run_linear(attn.out_proj, out)

    # --- generation (generate.py) ---

    def new_cache(self, batch: int, capacity: int) -> HybridCache:
        c = self.config
        full = [i for i, kind in enumerate(c.layer_types) if kind == "full_attention"]
        linear = [i for i, kind in enumerate(c.layer_types) if kind == "linear_attention"]
        return HybridCache(full, linear, batch, capacity, c.num_kv_heads, c.head_dim,
                           self.token_embedding().weight.device)

    def embed_ids(self, ids: torch.Tensor) -> torch.Tensor:
        return embed_tokens(self.token_embedding(), ids, self.config.vocab_size, "qwen3.5", skip_empty=False)

    def encode_image(self, image: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """IMAGE [B, H, W, C] -> (its language-model tokens [N, W] float32, grid [1, 3]) through the
        vision tower (`qwen35_vision`); a file without one refuses (`GenerationError`)."""
        from comfy_core.text_encoders.qwen35_vision import encode_image

        if self.transformer.visual is None or self.config.vision is None:
            raise GenerationError("qwen3.5: this text encoder file has no vision tower (visual.*), so it cannot "
                                  "read images")
        return encode_image(self.transformer.visual, self.config.vision, image)

    def prompt_inputs(self, row: Sequence[Any]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One prompt row (ids, embedding vectors, image entries) -> (input embeddings [1, T, W]
        float32, the M-RoPE positions [3, T] when it holds images, else None)."""
        from comfy_core.text_encoders.qwen25vl import image_position_ids, splice_images

        if not any(isinstance(token, dict) for token in row):
            ids, overrides = chunks_to_ids([list(row)], self.width, mismatch_pad=self.special_tokens["pad"])
            x = self.embed_ids(ids)
            return (apply_overrides(x, overrides, "qwen3.5") if overrides else x), None
        x, _, images = splice_images(self, row, "qwen3.5")
        return x, image_position_ids(images, x.shape[1], None, x.device)

    def prompt_embeds(self, row: Sequence[Any]) -> torch.Tensor:
        return self.prompt_inputs(row)[0]

    def decode_step(self, embeds: torch.Tensor, cache: HybridCache, positions: torch.Tensor | None = None
                    ) -> torch.Tensor:
        """Run embeds [B, T, W] through every block -> the last position's final normed state [B, W]
        float32. Positions: `positions` [3, T] for a prompt with images (decoding then continues
        from its largest position plus one, ComfyUI's `rope_offset`), else one per token on from the
        last."""
        from comfy_core.text_encoders.qwen35_vision import interleaved_tables

        start, length = cache.length, embeds.shape[1]
        total = start + length
        offset = cache.rope_offset
        if positions is None:
            positions = torch.arange(start + offset, total + offset, device=embeds.device).expand(3, -1)
        elif positions.shape != (3, length):
            raise GenerationError(f"qwen3.5: positions {tuple(positions.shape)} for {length} tokens")
        else:
            cache.rope_offset = int(positions[:, -1].max()) + 1 - total
        cos, sin = interleaved_tables(positions.to(embeds.device), self.config.rotary_dim, self.config.rope_theta)
        low = torch.finfo(torch.float32).min / 4
        bias = torch.full((length, total), low, dtype=torch.float32, device=embeds.device).triu_(start + 1)[None, None]
        x = embeds.float()
        for index, block in enumerate(self.transformer.model.layers):
            x = self._block(block, x, cos, sin, bias, cache, index)
        cache.advance(length)
        return compute_in_float32(self.transformer.model.norm, x[:, -1]).float()

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [B, W] -> logits [B, vocab] float32 (the head cast `LOGIT_ROWS` rows at a time)."""
        from comfy_core.models.quant_linear import QuantizedLinear

        layer = self.transformer.output_layer()
        hidden = hidden.float()
        if isinstance(layer, QuantizedLinear):
            return layer(hidden).float()
        weight = layer.weight
        if weight.dtype == torch.float32:
            return F.linear(hidden, weight.to(hidden.device))
        parts = []
        for start in range(0, weight.shape[0], LOGIT_ROWS):
            rows = weight[start:start + LOGIT_ROWS].to(device=hidden.device, dtype=torch.float32)
            parts.append(F.linear(hidden, torch.nan_to_num(rows) if weight.dtype in FP8_DTYPES else rows))
        return torch.cat(parts, dim=-1)


__all__ = ["ENDOFTEXT_ID", "IM_END_ID", "IM_START_ID", "STOP_TOKENS", "Qwen35Config", "Qwen35DetectionError",
           "Qwen35KeyError", "Qwen35TextEncoder", "Qwen35TokenizerMissingError", "holds_qwen35"]
