"""Gemma 4's text-tower configuration read from a file's names and shapes (`Gemma4Config`), with
ComfyUI's configs (`comfy/text_encoders/gemma4.py`: `Gemma4Config`, `Gemma4_E2B_Config`,
`Gemma4_12B_Config`, ...) for what the shapes cannot show; the tower is `gemma4.py` (whose module
doc describes the architecture and the files)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from comfy_core.text_encoders.decoder_llm import DecoderShape, block_count, shape_of
from comfy_core.text_encoders.errors import TextEncoderDetectionError, TextEncoderKeyError
from comfy_core.text_encoders.file_tokenizer import TOKENIZER_KEY  # the file's own tokenizer.json
from comfy_core.text_encoders.gemma4_media import VISION_MARKER as UNIFIED_VISION_MARKER

MARKER = "model.layers.0.layer_scalar"  # ComfyUI's Gemma 4 rule (with Gemma's post_feedforward_layernorm)
GEMMA4_SLOT = "gemma4"
SLIDING, FULL = "sliding_attention", "full_attention"
STOP_TOKENS = (1, 50, 106)  # ComfyUI's Gemma4Config.stop_tokens
# Tensors a Gemma 4 file holds besides the text tower (read by others or not at all): the tokenizer
# and the chat template (uint8 tensors), the vision / audio embedders and projectors, LTX's text
# projection (read by the LTX-2.5 text path), an LM head (tied here).
IGNORED_PREFIXES = ("tokenizer_json", "hf_asset__", "spiece_model", "vision_model.", "vision_tower.",
                    "multi_modal_projector.", "audio_model.", "audio_tower.", "audio_projector.", "embed_vision.",
                    "embed_audio.", "text_embedding_projection.", "lm_head.", "logit_scale")
# ComfyUI's configs, for what the shapes cannot show: (width, blocks) -> (name, window, shared blocks).
KNOWN = {(1536, 35): ("gemma4_e2b", 512, 20), (2560, 42): ("gemma4_e4b", 512, 18),
         (3840, 48): ("gemma4_12b", 1024, 0), (5376, 60): ("gemma4_31b", 1024, 0)}
SUPPRESS_12B = (258883, 258882)  # ComfyUI's Gemma4_12B_Config.suppress_tokens
BIDIRECTIONAL_VISION = ("gemma4_12b", "gemma4_31b")  # ComfyUI's configs with vision_bidirectional


class Gemma4DetectionError(TextEncoderDetectionError, ValueError):
    """A Gemma 4 tower's tensors are incomplete or inconsistent (names the key at fault)."""


class Gemma4KeyError(TextEncoderKeyError, ValueError):
    """A Gemma 4 state-dict key is missing, unknown or of the wrong shape."""


@dataclass(frozen=True)
class Gemma4Config(DecoderShape):
    """One Gemma 4 decoder (see the module doc for what shapes cannot show)."""

    prefix: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    vocab_size: int
    layer_types: tuple[str, ...]
    head_dim: int = 256
    global_head_dim: int = 512
    num_global_kv_heads: int | None = None  # a k = v global block's key heads (12B: 1)
    attention_k_eq_v: bool = False
    sliding_window: int = 512
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0  # global blocks'
    rope_local_theta: float = 10_000.0
    partial_rotary_factor: float = 0.25
    hidden_size_per_layer_input: int = 0
    vocab_size_per_layer_input: int = 0
    num_kv_shared_layers: int = 0
    use_double_wide_mlp: bool = False
    final_logit_softcapping: float | None = 30.0
    suppress_tokens: tuple[int, ...] = ()
    shared_kv_weights: bool = False  # the key/value-sharing blocks still carry (unused) k/v weights
    vision_bidirectional: bool = False  # an image's soft tokens see each other both ways (12B, 31B)
    dtype: str = "F32"
    slot: str = GEMMA4_SLOT
    name: str = "gemma4"

    # --- detection ---

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "",
                            **overrides: Any) -> "Gemma4Config | None":
        """The Gemma 4 tower under `prefix`, or None when there is none (no `layer_scalar`).
        `tensors`: names -> objects with `.shape`, never tensor data. `overrides`: fields the
        shapes cannot show, for towers ComfyUI has no config of (tests' tiny ones).
        Raises `Gemma4DetectionError` for incomplete or inconsistent towers."""
        if prefix + MARKER not in tensors:
            return None
        err, fam = Gemma4DetectionError, "Gemma 4"
        model = prefix + "model."
        vocab, width = shape_of(tensors, model + "embed_tokens.weight", 2, err, fam)
        layers = block_count(tensors, prefix, err)
        if layers < 1:
            raise err(f"Gemma 4 tower under {prefix!r} has no blocks")
        norms = [shape_of(tensors, f"{model}layers.{i}.self_attn.q_norm.weight", 1, err, fam)[0] for i in range(layers)]
        small, large = min(norms), max(norms)
        if small != large:
            types = tuple(FULL if n == large else SLIDING for n in norms)
        else:  # one head width: the k = v blocks are the global ones, else every sixth block
            no_v = [f"{model}layers.{i}.self_attn.v_proj.weight" not in tensors
                    and f"{model}layers.{i}.self_attn.k_proj.weight" in tensors for i in range(layers)]
            types = tuple(FULL if (no_v[i] if any(no_v) else (i + 1) % 6 == 0) else SLIDING for i in range(layers))
        types = types[:-1] + (FULL,)  # the last block is global (transformers forces it too)
        first_sliding = next((i for i, t in enumerate(types) if t == SLIDING), None)
        first_full = types.index(FULL)
        ref = first_sliding if first_sliding is not None else first_full
        head_dim = norms[ref]
        global_head_dim = norms[first_full]
        attn = f"{model}layers.{ref}.self_attn."
        q_out = shape_of(tensors, attn + "q_proj.weight", 2, err, fam)[0]
        k_out = shape_of(tensors, attn + "k_proj.weight", 2, err, fam)[0]
        if q_out % head_dim or k_out % head_dim:
            raise err(f"Gemma 4 key {attn + 'q_proj.weight'!r}: {q_out} / {k_out} rows are not whole "
                      f"{head_dim}-wide heads")
        heads, kv_heads = q_out // head_dim, k_out // head_dim
        full_attn = f"{model}layers.{first_full}.self_attn."
        k_eq_v = full_attn + "v_proj.weight" not in tensors
        global_kv = shape_of(tensors, full_attn + "k_proj.weight", 2, err, fam)[0] // global_head_dim
        intermediate = shape_of(tensors, f"{model}layers.0.mlp.gate_proj.weight", 2, err, fam)[0]
        mlp_rows = [shape_of(tensors, f"{model}layers.{i}.mlp.gate_proj.weight", 2, err, fam)[0] for i in range(layers)]
        wide = [rows == 2 * intermediate for rows in mlp_rows]
        name, window, shared = KNOWN.get((width, layers), ("gemma4", 512, 0))
        if any(wide):
            shared = layers - wide.index(True)
        missing_kv = [f"{model}layers.{i}.self_attn.k_proj.weight" not in tensors for i in range(layers)]
        if any(missing_kv):
            shared = layers - missing_kv.index(True)
        ple_key = model + "embed_tokens_per_layer.weight"
        ple_vocab, ple_width = shape_of(tensors, ple_key, 2, err, fam) if ple_key in tensors else (0, 0)
        if ple_width % layers:
            raise err(f"Gemma 4 key {ple_key!r}: width {ple_width} is not {layers} blocks' per-layer inputs")
        values = dict(
            prefix=prefix, hidden_size=width, intermediate_size=intermediate, num_layers=layers, num_heads=heads,
            num_kv_heads=kv_heads, vocab_size=vocab, layer_types=types, head_dim=head_dim,
            global_head_dim=global_head_dim, num_global_kv_heads=global_kv if k_eq_v else None,
            attention_k_eq_v=k_eq_v, sliding_window=window, hidden_size_per_layer_input=ple_width // layers,
            vocab_size_per_layer_input=ple_vocab, num_kv_shared_layers=shared, use_double_wide_mlp=any(wide),
            suppress_tokens=SUPPRESS_12B if name == "gemma4_12b" else (),
            shared_kv_weights=shared > 0 and not missing_kv[-1],
            vision_bidirectional=name in BIDIRECTIONAL_VISION or prefix + UNIFIED_VISION_MARKER in tensors,
            dtype=str(getattr(tensors[model + "embed_tokens.weight"], "dtype", "F32")), name=name)
        values.update(overrides)
        config = cls(**values)
        config.check(tensors)
        return config

    def check(self, tensors: Mapping[str, Any]) -> None:
        """Every tower weight present with the shape this config gives (`Gemma4DetectionError`)."""
        for name, shape in self.weight_shapes().items():
            key = self.prefix + "model." + name
            if key not in tensors:
                raise Gemma4DetectionError(f"Gemma 4 tower under {self.prefix!r} lacks {key!r}")
            got = tuple(int(d) for d in tensors[key].shape)
            if got != shape:
                raise Gemma4DetectionError(f"Gemma 4 key {key!r}: expected shape {shape}, got {got}")

    # --- the layout ---

    @property
    def first_kv_shared(self) -> int:
        return self.num_layers - self.num_kv_shared_layers

    def layer_type(self, index: int) -> str:
        return self.layer_types[index]

    def attention_shape(self, index: int) -> tuple[int, int, bool]:
        """(head width, key heads, values are the keys) of block `index`."""
        if self.layer_types[index] == SLIDING:
            return self.head_dim, self.num_kv_heads, False
        if self.attention_k_eq_v:
            return self.global_head_dim, self.num_global_kv_heads or self.num_kv_heads, True
        return self.global_head_dim, self.num_kv_heads, False

    def computes_kv(self, index: int) -> bool:
        return index < self.first_kv_shared

    def has_kv_weights(self, index: int) -> bool:
        return self.computes_kv(index) or self.shared_kv_weights

    def mlp_width(self, index: int) -> int:
        wide = self.use_double_wide_mlp and not self.computes_kv(index)
        return self.intermediate_size * (2 if wide else 1)

    def kv_source(self, index: int) -> int:
        """The block whose keys / values block `index` attends over (itself unless it shares)."""
        if self.computes_kv(index):
            return index
        kind = self.layer_types[index]
        sources = [i for i in range(self.first_kv_shared) if self.layer_types[i] == kind]
        if not sources:
            raise Gemma4DetectionError(f"Gemma 4: block {index} shares the keys of a {kind} block, and none "
                                       f"of the first {self.first_kv_shared} blocks is one")
        return sources[-1]

    def weight_shapes(self) -> dict[str, tuple[int, ...]]:
        """Name (relative to `model.`) -> shape of every tensor the tower reads."""
        w = self.hidden_size
        shapes: dict[str, tuple[int, ...]] = {"embed_tokens.weight": (self.vocab_size, w), "norm.weight": (w,)}
        ple = self.hidden_size_per_layer_input
        if ple:
            shapes["embed_tokens_per_layer.weight"] = (self.vocab_size_per_layer_input, self.num_layers * ple)
            shapes["per_layer_model_projection.weight"] = (self.num_layers * ple, w)
            shapes["per_layer_projection_norm.weight"] = (ple,)
        for i in range(self.num_layers):
            base = f"layers.{i}."
            d, kv, k_eq_v = self.attention_shape(i)
            shapes[base + "self_attn.q_proj.weight"] = (self.num_heads * d, w)
            shapes[base + "self_attn.o_proj.weight"] = (w, self.num_heads * d)
            shapes[base + "self_attn.q_norm.weight"] = (d,)
            if self.has_kv_weights(i):
                shapes[base + "self_attn.k_proj.weight"] = (kv * d, w)
                shapes[base + "self_attn.k_norm.weight"] = (d,)
                if not k_eq_v:
                    shapes[base + "self_attn.v_proj.weight"] = (kv * d, w)
            inner = self.mlp_width(i)
            shapes[base + "mlp.gate_proj.weight"] = (inner, w)
            shapes[base + "mlp.up_proj.weight"] = (inner, w)
            shapes[base + "mlp.down_proj.weight"] = (w, inner)
            for norm in ("input", "post_attention", "pre_feedforward", "post_feedforward"):
                shapes[base + f"{norm}_layernorm.weight"] = (w,)
            shapes[base + "layer_scalar"] = (1,)
            if ple:
                shapes[base + "per_layer_input_gate.weight"] = (ple, w)
                shapes[base + "per_layer_projection.weight"] = (w, ple)
                shapes[base + "post_per_layer_input_norm.weight"] = (w,)
        return shapes

    def to_transformers(self) -> Any:
        """transformers' `Gemma4TextConfig` of this shape and ComfyUI's settings (the tests' reference)."""
        from transformers import Gemma4TextConfig

        config = Gemma4TextConfig(
            vocab_size=self.vocab_size, hidden_size=self.hidden_size, intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_layers, num_attention_heads=self.num_heads,
            num_key_value_heads=self.num_kv_heads, head_dim=self.head_dim, global_head_dim=self.global_head_dim,
            num_global_key_value_heads=self.num_global_kv_heads, attention_k_eq_v=self.attention_k_eq_v,
            layer_types=list(self.layer_types), sliding_window=self.sliding_window, rms_norm_eps=self.rms_norm_eps,
            rope_parameters={SLIDING: {"rope_type": "default", "rope_theta": self.rope_local_theta},
                             FULL: {"rope_type": "proportional", "partial_rotary_factor": self.partial_rotary_factor,
                                    "rope_theta": self.rope_theta}},
            hidden_size_per_layer_input=self.hidden_size_per_layer_input,
            vocab_size_per_layer_input=self.vocab_size_per_layer_input or self.vocab_size,
            num_kv_shared_layers=self.num_kv_shared_layers, use_double_wide_mlp=self.use_double_wide_mlp,
            final_logit_softcapping=self.final_logit_softcapping, hidden_activation="gelu_pytorch_tanh",
            tie_word_embeddings=True, use_cache=False)
        config._attn_implementation = "eager"
        return config


__all__ = ["FULL", "GEMMA4_SLOT", "Gemma4Config", "Gemma4DetectionError", "Gemma4KeyError", "IGNORED_PREFIXES",
           "KNOWN", "MARKER", "SLIDING", "STOP_TOKENS", "SUPPRESS_12B", "TOKENIZER_KEY"]
