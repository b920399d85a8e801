"""`ClipTextConfig`: the shape of one CLIP text tower, read from checkpoint tensor names and shapes.

Two key layouts exist in single-file checkpoints:
- "hf": transformers' CLIP text model (`embeddings.token_embedding.weight`,
  `encoder.layers.N.self_attn.q_proj.weight`, `final_layer_norm.weight`), used for OpenAI's CLIP-L
  (SD1 `cond_stage_model.transformer.text_model.`, SDXL `conditioner.embedders.0.transformer.text_model.`);
- "open_clip": OpenCLIP's text tower (`token_embedding.weight`, `positional_embedding`,
  `transformer.resblocks.N.attn.in_proj_weight`, `ln_final.weight`, `text_projection`), used for
  SD2's ViT-H (`cond_stage_model.model.`) and SDXL's ViT-bigG (`conditioner.embedders.1.model.`).

Detection reads only names, shapes and dtypes (`tensors`: name -> object with `.shape` tuple and
`.dtype` str, e.g. parsed from a safetensors header). Facts that shapes cannot show follow the
published models: 64-wide attention heads (OpenAI CLIP-L 12 heads, ViT-H 16, bigG 20), quick-GELU
for OpenAI's CLIP-L and GELU for OpenCLIP towers, layer-norm eps 1e-5.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from comfy_core.text_encoders.errors import TextEncoderDetectionError

SLOTS = ("clip_l", "clip_h", "clip_g")
HEAD_DIM = 64
LAYOUT_HF = "hf"
LAYOUT_OPEN_CLIP = "open_clip"


@dataclass(frozen=True)
class ClipTextConfig:
    """One CLIP text tower: where its keys are and how wide it is."""

    slot: str  # "clip_l" | "clip_h" | "clip_g": the child name in the encoder set
    prefix: str  # checkpoint key prefix, ending with "."
    layout: str  # "hf" | "open_clip"
    width: int
    layers: int
    heads: int
    intermediate: int
    vocab_size: int
    max_positions: int
    projection_dim: int
    has_projection: bool  # False: SD1/SDXL CLIP-L carry none; an identity is used (pooled = unprojected)
    activation: str  # "quick_gelu" | "gelu"
    dtype: str = "F32"  # storage dtype of the token embedding in the checkpoint (safetensors name)

    def __post_init__(self) -> None:
        if self.slot not in SLOTS:
            raise TextEncoderDetectionError(f"text encoder slot must be one of {SLOTS}, got {self.slot!r}")
        if self.layout not in (LAYOUT_HF, LAYOUT_OPEN_CLIP):
            raise TextEncoderDetectionError(f"text encoder layout must be 'hf' or 'open_clip', got {self.layout!r}")
        if self.width % self.heads:
            raise TextEncoderDetectionError(f"{self.prefix}: width {self.width} is not divisible by {self.heads} heads")

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str, slot: str | None = None,
                            heads: int | None = None) -> "ClipTextConfig | None":
        """The config of the tower under `prefix`, or None when no tower is there.

        `slot` defaults from the layout (hf -> clip_l; open_clip -> clip_g if 1280 wide or more,
        else clip_h); `heads` defaults to width / 64, or 1 for widths not a multiple of 64
        (only tiny test towers have those). Raises `TextEncoderDetectionError` for a tower whose
        keys are incomplete or inconsistent.
        """
        if f"{prefix}final_layer_norm.weight" in tensors:
            return _detect_hf(tensors, prefix, slot, heads)
        if f"{prefix}ln_final.weight" in tensors and f"{prefix}token_embedding.weight" in tensors:
            return _detect_open_clip(tensors, prefix, slot, heads)
        return None

    def to_model_config(self) -> Any:
        """The shape of our `ClipTextModelWithProjection` for this tower (clip_text_model.py)."""
        from comfy_core.text_encoders.clip_text_model import ClipTextModelConfig

        return ClipTextModelConfig(
            vocab_size=self.vocab_size, hidden_size=self.width, intermediate_size=self.intermediate,
            num_hidden_layers=self.layers, num_attention_heads=self.heads, max_position_embeddings=self.max_positions,
            projection_dim=self.projection_dim, hidden_act=self.activation, layer_norm_eps=1e-5)

    def to_transformers(self) -> Any:
        """transformers' `CLIPTextConfig` for this tower (SDPA attention, our eos id)."""
        from transformers import CLIPTextConfig

        config = CLIPTextConfig(
            vocab_size=self.vocab_size, hidden_size=self.width, intermediate_size=self.intermediate,
            projection_dim=self.projection_dim, num_hidden_layers=self.layers,
            num_attention_heads=self.heads, max_position_embeddings=self.max_positions,
            hidden_act=self.activation, layer_norm_eps=1e-5, bos_token_id=49406, eos_token_id=49407,
            pad_token_id=1,
        )
        config._attn_implementation = "sdpa"
        return config


def default_heads(width: int) -> int:
    return width // HEAD_DIM if width % HEAD_DIM == 0 else 1


def _shape(tensors: Mapping[str, Any], key: str) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in tensors[key].shape)
    except KeyError:
        raise TextEncoderDetectionError(f"text encoder key {key!r} is missing") from None


def _count_layers(tensors: Mapping[str, Any], pattern: str) -> int:
    regex = re.compile(pattern)
    found = {int(m.group(1)) for name in tensors if (m := regex.match(name))}
    if not found:
        return 0
    if found != set(range(max(found) + 1)):
        missing = sorted(set(range(max(found) + 1)) - found)
        raise TextEncoderDetectionError(f"text encoder layers {missing} are missing ({pattern})")
    return max(found) + 1


def _expect(prefix: str, what: str, shape: tuple[int, ...], expected: tuple[int, ...]) -> None:
    if shape != expected:
        raise TextEncoderDetectionError(f"{prefix}{what}: expected shape {expected}, got {shape}")


def _embeddings_and_layers(tensors: Mapping[str, Any], prefix: str, token_key: str, position_key: str,
                           layer_stem: str) -> tuple[int, int, int, int]:
    """(vocab size, width, positions, layers) of a CLIP text tower in either layout: the token and
    position embeddings (of one width) and the count of `<layer_stem>.N.*` layers (at least one)."""
    vocab, width = _shape(tensors, prefix + token_key)
    positions, pos_width = _shape(tensors, prefix + position_key)
    _expect(prefix, position_key, (positions, pos_width), (positions, width))
    layers = _count_layers(tensors, re.escape(prefix + layer_stem) + r"\.(\d+)\.")
    if layers == 0:
        raise TextEncoderDetectionError(f"{prefix}: no {layer_stem}.N.* keys")
    return vocab, width, positions, layers


def _detect_hf(tensors: Mapping[str, Any], prefix: str, slot: str | None, heads: int | None) -> ClipTextConfig:
    vocab, width, positions, layers = _embeddings_and_layers(
        tensors, prefix, "embeddings.token_embedding.weight", "embeddings.position_embedding.weight", "encoder.layers")
    intermediate = _shape(tensors, f"{prefix}encoder.layers.0.mlp.fc1.weight")[0]
    # A projection, when present, sits beside `text_model.` (transformers' WithProjection layout).
    projection_key = hf_projection_key(prefix)
    has_projection = projection_key in tensors
    projection_dim = _shape(tensors, projection_key)[0] if has_projection else width
    return ClipTextConfig(
        slot=slot or "clip_l", prefix=prefix, layout=LAYOUT_HF, width=width, layers=layers,
        heads=heads or default_heads(width), intermediate=intermediate, vocab_size=vocab,
        max_positions=positions, projection_dim=projection_dim, has_projection=has_projection,
        # OpenAI's CLIP-L uses quick-GELU; an OpenCLIP tower saved in transformers' layout (SD3's
        # CLIP-G in `text_encoders.clip_g.`) keeps OpenCLIP's GELU.
        activation="quick_gelu" if (slot or "clip_l") == "clip_l" else "gelu",
        dtype=str(tensors[f"{prefix}embeddings.token_embedding.weight"].dtype),
    )


def hf_projection_key(prefix: str) -> str:
    base = prefix[: -len("text_model.")] if prefix.endswith("text_model.") else prefix
    return f"{base}text_projection.weight"


def _detect_open_clip(tensors: Mapping[str, Any], prefix: str, slot: str | None, heads: int | None) -> ClipTextConfig:
    vocab, width, positions, layers = _embeddings_and_layers(
        tensors, prefix, "token_embedding.weight", "positional_embedding", "transformer.resblocks")
    _expect(prefix, "transformer.resblocks.0.attn.in_proj_weight",
            _shape(tensors, f"{prefix}transformer.resblocks.0.attn.in_proj_weight"), (3 * width, width))
    intermediate = _shape(tensors, f"{prefix}transformer.resblocks.0.mlp.c_fc.weight")[0]
    has_projection = f"{prefix}text_projection" in tensors
    projection_dim = width
    if has_projection:
        proj_in, projection_dim = _shape(tensors, f"{prefix}text_projection")
        _expect(prefix, "text_projection", (proj_in, projection_dim), (width, projection_dim))
    return ClipTextConfig(
        slot=slot or ("clip_g" if width >= 1280 else "clip_h"), prefix=prefix, layout=LAYOUT_OPEN_CLIP,
        width=width, layers=layers, heads=heads or default_heads(width), intermediate=intermediate,
        vocab_size=vocab, max_positions=positions, projection_dim=projection_dim,
        has_projection=has_projection, activation="gelu",
        dtype=str(tensors[f"{prefix}token_embedding.weight"].dtype),
    )
