"""The Qwen2.5-VL text tower (Qwen Team 2025, "Qwen2.5-VL Technical Report"): Qwen-Image's
Qwen2.5-VL-7B-Instruct encoder, as ComfyUI's `comfy/text_encoders/llama.py` (`Qwen25_7BVLI_Config`,
`Qwen25_7BVLI`) and `qwen_image.py` (`Qwen25_7BVLIModel`) run it.

Weights (loaded by `qwen25vl_load.build_qwen25vl_encoder`): the language model as transformers'
`Qwen2Model` modules (`embed_tokens`, `layers.N.self_attn.{q,k,v}_proj` with biases, `o_proj` without,
`layers.N.mlp.{gate,up,down}_proj`, `layers.N.input_layernorm`, `layers.N.post_attention_layernorm`,
`norm`) held as `transformer.model`, and the vision tower's weights as transformers'
`Qwen2_5_VisionTransformerPretrainedModel` modules held as `transformer.visual` (`patch_embed.proj`, `blocks.N.{norm1,norm2,attn.qkv,attn.proj,
mlp.*}`, `merger.{ln_q,mlp.0,mlp.2}`), so the parameter names are ComfyUI's
(`qwen25_7b.transformer.model.layers.0...`, `qwen25_7b.transformer.visual.blocks.0...`). Files:
ComfyUI's `qwen_2.5_vl_7b*.safetensors` hold `model.*` and `visual.*` (an `lm_head.weight` is
ignored: the encoder never reads it); in single files the tower sits under
`text_encoders.qwen25_7b.transformer.`. transformers' classes give the modules and names only; the
forward pass is ours: every layer computes in float32 whatever the weights are stored in (bf16,
fp16, fp8, ComfyUI's scaled fp8: one layer's weights cast at a time, `compute_in_float32`, ComfyUI's
`manual_cast`) and attention goes through the backend in force.

The block is Qwen2's (pre-norm decoder, causal): RMSNorm; q/k/v projections with bias, no q/k norm;
rotary position embedding (Su et al. 2021, "RoFormer", rotate-half, theta 1e6) on q and k; grouped-
query attention; output projection; RMSNorm; SwiGLU `down(silu(gate(x)) * up(x))`. Qwen2.5-VL's
multimodal RoPE ("M-RoPE": the 128 channels of a head split into sections of 16 / 24 / 24 frequency
pairs driven by temporal / height / width positions) is ordinary RoPE when the three positions are
equal, which they are for text (ComfyUI then passes no position ids: 1-D positions 0..T-1);
`mrope_tables` builds the three-axis tables for position ids `[3, T]`. What the shapes cannot show
is the published configuration: heads of 128 channels (so `heads = q width / 128`), RMS epsilon
1e-6, rope theta 1e6, M-RoPE sections (16, 24, 24), as ComfyUI's `Qwen25_7BVLI_Config` fixes them.

`Qwen25VLTextEncoder` is ComfyUI's `SDClipModel` as `Qwen25_7BVLIModel` sets it up: layer "last"
(the final normed output; `layer_idx` None), special tokens `{"pad": 151643}` (no start, no end),
attention masks used and returned; the token mask is ComfyUI's (`qwen3.token_mask`). Image entries
in a token row (Qwen-Image-Edit) run through the vision tower (`qwen25vl_vision.py`) and take
their M-RoPE positions (`image_position_ids`). The attention
bias is the same as the Qwen3 tower's (`qwen3.attention_bias`). Generation (TextGenerate, prompts
with images included) is ComfyUI's `Qwen25_7BVLIModel.generate`: the prompt's M-RoPE positions for
the prefill, then one position per new token from the largest prompt position plus one; the LM
head is the file's `lm_head.weight` when it has one, else the token table; stop tokens Qwen's.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch
from torch import nn

from comfy_core.models.float32_compute import compute_in_float32
from comfy_core.text_encoders.decoder_llm import (DecoderShape, apply_overrides, attention_bias, attention_block_shapes,
                                                  block_count, embed_tokens, prenorm_block, rotary_tables, run_to_layer)
from comfy_core.text_encoders.errors import TextEncoderKeyError, TokenizeError
from comfy_core.text_encoders.qwen3 import Qwen3TextEncoder, Qwen3Transformer, token_mask
# The tower's detection and input errors and its vision config live in the vision module (below this one).
from comfy_core.text_encoders.qwen25vl_vision import (
    Qwen25VisionConfig,
    Qwen25VLDetectionError,
    Qwen25VLInputError,
    encode_image,
    expect_shape,
    shape_of,
)
from comfy_core.text_encoders.qwen_tokenizer import PAD_ID
from comfy_core.text_encoders.token_chunks import EmbeddingOverride, chunks_to_ids

SCALED_FP8_MARKER = "scaled_fp8"  # ComfyUI's legacy scaled-fp8 files (comfy/utils.py convert_old_quants)
MARKER = "model.layers.0.self_attn.k_proj.bias"  # Qwen2 / Qwen2.5: biased k/v projections
QK_NORM = "model.layers.0.self_attn.q_norm.weight"  # Qwen3 (not this tower)
GEMMA_MARKER = "model.layers.0.post_feedforward_layernorm.weight"
QWEN25_7B_SLOT = "qwen25_7b"
# ComfyUI's names by key/value width (`comfy/sd.py: detect_te_model`: k_proj.bias 256 -> 3B, 512 ->
# 7B); any other width (a reduced test model) is named as the 7B, the encoder Qwen-Image uses.
SLOTS_BY_KV_WIDTH = {256: "qwen25_3b", 512: QWEN25_7B_SLOT}
HEAD_DIM = 128
MROPE_SECTION = (16, 24, 24)  # frequency pairs driven by the temporal / height / width positions


class Qwen25VLKeyError(TextEncoderKeyError, ValueError):
    """A Qwen2.5-VL state-dict key is missing, unknown, unsupported or of the wrong shape."""


@dataclass(frozen=True)
class Qwen25VLConfig(DecoderShape):
    """One Qwen2.5-VL language model used as a text encoder: where its keys are and how it is shaped
    (see the module doc for what shapes cannot show)."""

    prefix: str  # the part before `model.` ("" for text-encoder files)
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    vocab_size: int
    head_dim: int = HEAD_DIM
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    mrope_section: tuple[int, int, int] = MROPE_SECTION
    dtype: str = "F32"  # storage dtype of the file's weights (safetensors name), from the final norm
    scaled_fp8: bool = False  # ComfyUI's legacy `scaled_fp8` marker (per-layer `scale_weight` keys)
    slot: str = QWEN25_7B_SLOT
    vision: Qwen25VisionConfig | None = None

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "Qwen25VLConfig | None":
        """The config of the Qwen2.5-VL tower under `prefix`, or None when there is none (no biased
        k projection, or a Qwen3 / Gemma tower). `tensors`: name -> object with `.shape` (and
        optionally `.dtype`), never tensor data. Raises `Qwen25VLDetectionError` for incomplete
        or inconsistent towers."""
        if prefix + MARKER not in tensors or prefix + QK_NORM in tensors or prefix + GEMMA_MARKER in tensors:
            return None
        model = prefix + "model."
        vocab, hidden = shape_of(tensors, model + "embed_tokens.weight", 2)
        expect_shape(model + "norm.weight", shape_of(tensors, model + "norm.weight", 1), (hidden,))
        attn = model + "layers.0.self_attn."
        q_out, _ = shape_of(tensors, attn + "q_proj.weight", 2)
        (k_out,) = shape_of(tensors, attn + "k_proj.bias", 1)
        if q_out % HEAD_DIM or k_out % HEAD_DIM:
            raise Qwen25VLDetectionError(f"{attn}q_proj / k_proj: {q_out} / {k_out} outputs do not split into "
                                         f"Qwen2.5's heads of {HEAD_DIM}")
        heads, kv_heads = q_out // HEAD_DIM, k_out // HEAD_DIM
        if heads % kv_heads:
            raise Qwen25VLDetectionError(f"{attn}: {heads} query heads do not share {kv_heads} key/value heads evenly")
        intermediate, _ = shape_of(tensors, model + "layers.0.mlp.gate_proj.weight", 2)
        layers = block_count(tensors, prefix, Qwen25VLDetectionError)
        config = cls(prefix=prefix, hidden_size=hidden, intermediate_size=intermediate, num_layers=layers,
                     num_heads=heads, num_kv_heads=kv_heads, vocab_size=vocab,
                     dtype=str(getattr(tensors[model + "norm.weight"], "dtype", "F32")),
                     scaled_fp8=prefix + SCALED_FP8_MARKER in tensors,
                     slot=SLOTS_BY_KV_WIDTH.get(k_out, QWEN25_7B_SLOT),
                     vision=Qwen25VisionConfig.detect_from_weights(tensors, prefix, hidden))
        for index in range(layers):
            for name, shape in config.block_shapes(index).items():
                expect_shape(model + name, shape_of(tensors, model + name, len(shape)), shape)
        return config

    def block_shapes(self, index: int) -> dict[str, tuple[int, ...]]:
        """Name (relative to `model.`) -> shape of every weight of block `index`."""
        base = f"layers.{index}."
        return {base + "input_layernorm.weight": (self.hidden_size,),
                **attention_block_shapes(self, index, attn_bias=True),
                base + "post_attention_layernorm.weight": (self.hidden_size,)}

    def to_transformers(self) -> Any:
        """transformers' `Qwen2Config` for a language model of this shape (modules and names only)."""
        from transformers import Qwen2Config

        config = Qwen2Config(
            **self.transformers_shape(), tie_word_embeddings=False, max_position_embeddings=128000)
        config._attn_implementation = "sdpa"
        return config


@dataclass(frozen=True)
class Qwen25VLOptions:
    """How the tower runs when no encoder set gave it options (ComfyUI's `Qwen25_7BVLIModel`
    defaults: layer "last", no hidden-state norm choice to make)."""

    slot: str = QWEN25_7B_SLOT
    token_key: str = QWEN25_7B_SLOT
    pad_token: int = PAD_ID
    layer_idx: int | None = None
    layer_norm_hidden: bool = False
    projected_pooled: bool = False


def mrope_tables(position_ids: torch.Tensor, head_dim: int, theta: float, sections: Sequence[int],
                 device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [T, head_dim] float32 of Qwen2.5-VL's M-RoPE for position ids [3, T] (temporal,
    height, width): the rotate-half tables of each axis, channel block j of the (sections * 2)
    split taken from axis j mod 3. Equal rows give `rotary_tables`' result."""
    if position_ids.dim() != 2 or position_ids.shape[0] != 3:
        raise Qwen25VLInputError(f"qwen2.5-vl: position ids must be [3, tokens], got {tuple(position_ids.shape)}")
    if 2 * sum(sections) != head_dim:
        raise Qwen25VLInputError(f"qwen2.5-vl: M-RoPE sections {tuple(sections)} do not cover a {head_dim}-channel head")
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    freqs = position_ids.to(device=device, dtype=torch.float32)[:, :, None] * inv_freq  # [3, T, d/2]
    angles = torch.cat((freqs, freqs), dim=-1)  # [3, T, d]
    parts = angles.split(list(sections) * 2, dim=-1)
    chosen = torch.cat([part[index % 3] for index, part in enumerate(parts)], dim=-1)  # [T, d]
    return chosen.cos(), chosen.sin()


def image_position_ids(images: Sequence[tuple[int, int, torch.Tensor]], length: int, mask: torch.Tensor | None,
                       device: torch.device) -> torch.Tensor | None:
    """M-RoPE positions [3, T] of a row holding image tokens (ComfyUI's `Qwen25_7BVLI.forward`, the
    rule of Qwen2.5-VL's `get_rope_index`): `images` lists (start, count, grid [1, 3]) of each image's
    merged tokens in order. Text before the first image counts 0, 1, ...; an image's tokens share
    the temporal position `start` (shifted by the earlier images) and take rows / columns counted from
    it over its merged grid; the text after it continues from `start + max(merged rows, columns)`,
    counting only tokens the mask keeps (masked ones keep the position they had). None without images."""
    if not images:
        return None
    positions = torch.ones(3, length, dtype=torch.long, device=device)
    shift = 0
    for number, (start, count, grid) in enumerate(images):
        if number == 0:
            positions[:, :start] = torch.arange(start, device=device)
        end = start + count
        rows, cols = int(grid[0][1]) // 2, int(grid[0][2]) // 2
        if rows * cols != count:
            raise Qwen25VLInputError(f"qwen2.5-vl: {count} image tokens for a merged grid of {rows}x{cols}")
        span = int(grid.max()) // 2
        after = start + span + shift  # where the text after this image continues
        if mask is not None:
            kept = mask[0, end:].to(device)
            counted = kept.cumsum(0) - 1 + after
            positions[:, end:] = torch.where(kept.bool(), counted, positions[0, end:])
        else:
            positions[:, end:] = torch.arange(after, after + length - end, device=device)
        index = torch.arange(count, device=device)
        positions[0, start:end] = start + shift
        positions[1, start:end] = start + shift + index // cols
        positions[2, start:end] = start + shift + index % cols
        shift += span - count
    return positions


class Qwen25VLTransformer(Qwen3Transformer):
    """ComfyUI's `Qwen25_7BVLI` (`llama.py`): the language model as `model`, the vision tower's
    modules as `visual` (None when the file has none), `get_input_embeddings()`."""

    def __init__(self, model: nn.Module, visual: nn.Module | None = None) -> None:
        super().__init__(model)
        self.visual = visual


class Qwen25VLTextEncoder(Qwen3TextEncoder):
    """One Qwen2.5-VL tower, ComfyUI's `Qwen25_7BVLIModel` surface (an `SDClipModel`) for our
    `TextEncoderSet` (see the module doc). The token-level surface (`forward`, `encode_token_weights`,
    clip options, masks) is the Qwen3 tower's; the block and the positions are Qwen2.5-VL's."""

    def __init__(self, config: Qwen25VLConfig, transformer: Qwen25VLTransformer) -> None:
        super().__init__(config, transformer)  # type: ignore[arg-type]
        self.options = self.default_options = Qwen25VLOptions(slot=config.slot, token_key=config.slot)

    def forward(self, tokens: Any) -> tuple:
        """ComfyUI's `SDClipModel.forward(tokens)`; rows holding image entries (`{"type": "image",
        "data": IMAGE}`, Qwen-Image-Edit's tokenizer puts them where `<|image_pad|>` was) are
        ComfyUI's `process_tokens` with `preprocess_embed`: each image becomes its vision-tower
        tokens at that place (attended), and the positions become M-RoPE's (`image_position_ids`)."""
        rows = tokens.tolist() if isinstance(tokens, torch.Tensor) else [list(row) for row in tokens]
        if not any(isinstance(token, dict) for row in rows for token in row):
            return super().forward(tokens)
        if len(rows) != 1:
            raise Qwen25VLInputError(f"qwen2.5-vl: prompts with images are encoded one row at a time, got {len(rows)}")
        x, mask, images = self._spliced(rows[0])
        attention = mask if self.enable_attention_masks else None
        positions = image_position_ids(images, x.shape[1], attention, x.device)
        hidden = self.encode_embeds(x, self.options.layer_idx, self.options.layer_norm_hidden, attention, positions)
        if self.zero_out_masked:
            hidden = hidden * mask.to(device=hidden.device, dtype=hidden.dtype).unsqueeze(-1)
        if self.return_attention_masks:
            return hidden, None, {"attention_mask": mask.to(hidden.device)}
        return hidden, None

    def _spliced(self, row: Sequence[Any]) -> tuple[torch.Tensor, torch.Tensor, list[tuple[int, int, torch.Tensor]]]:
        """`splice_images` with this tower (its images' tokens from `encode_image`)."""
        return splice_images(self, row, "qwen2.5-vl")

    # --- generation (ComfyUI's `Qwen25_7BVLIModel.generate` with `BaseGenerate`; see generate.py) ---

    can_generate = True
    generation_media = ("image",)  # what TextGenerate may give this tower besides text

    def prompt_inputs(self, row: Sequence[Any]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One prompt row (ids, embedding vectors, image entries) -> (input embeddings [1, T, W]
        float32, the M-RoPE positions [3, T] when it holds images, else None). A padded prompt is
        refused, as ComfyUI refuses it (`GenerationError`)."""
        from comfy_core.text_encoders.generate import GenerationError

        if not any(isinstance(token, dict) for token in row):
            ids, overrides = chunks_to_ids([list(row)], self.width, mismatch_pad=self.special_tokens["pad"])
            mask = token_mask([list(row)], self.special_tokens["pad"])
            x = self.embed_ids(ids)
            x = _apply_overrides(x, overrides) if overrides else x
            images: list[tuple[int, int, torch.Tensor]] = []
        else:
            x, mask, images = self._spliced(row)
        if not bool(mask.all()):
            raise GenerationError("qwen2.5-vl: text generation does not take a padded prompt")
        return x, image_position_ids(images, x.shape[1], None, x.device)

    def prompt_embeds(self, row: Sequence[Any]) -> torch.Tensor:
        return self.prompt_inputs(row)[0]

    def decode_step(self, embeds: torch.Tensor, cache: Any, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Run embeds [B, T, W] through every block, their keys and values joining the cache -> the
        last position's final normed state [B, W] float32. Positions: `positions` [3, T] for the
        prompt when it holds images (decoding then continues from the largest prompt position
        plus one on all three axes, ComfyUI's `next_pos`), else one position per token on from the
        last (ordinary RoPE while no image was seen)."""
        start, length = cache.length, embeds.shape[1]
        base = getattr(cache, "mrope_next", None)
        if positions is None:
            first = start if base is None else base
            positions = torch.arange(first, first + length, device=embeds.device).expand(3, -1)
            if base is not None:
                cache.mrope_next = base + length
        else:
            if positions.shape != (3, length):
                raise Qwen25VLInputError(f"qwen2.5-vl: positions {tuple(positions.shape)} for {length} tokens")
            cache.mrope_next = int(positions[:, -1].max()) + 1
        config = self.config
        cos, sin = mrope_tables(positions.to(embeds.device), config.head_dim, config.rope_theta, config.mrope_section,
                                embeds.device)
        total = start + length
        low = torch.finfo(torch.float32).min / 4
        bias = torch.full((length, total), low, dtype=torch.float32, device=embeds.device).triu_(start + 1)[None, None]
        x = embeds.float()
        for index, block in enumerate(self.transformer.model.layers):
            x = self._block(block, x, cos, sin, bias, cache, index)
        cache.advance(length)
        return compute_in_float32(self.transformer.model.norm, x[:, -1]).float()

    def encode_image(self, image: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """IMAGE [B, H, W, C] -> (its language-model tokens [N, W] float32, grid [1, 3]) through the
        vision tower (`qwen25vl_vision`); a tower loaded without one refuses."""
        visual = self.transformer.visual
        if visual is None or self.config.vision is None:
            raise Qwen25VLInputError("qwen2.5-vl: this text encoder file has no vision tower (visual.*), so it "
                                     "cannot encode images")
        return encode_image(visual, self.config.vision, image)

    def encode_ids(self, ids: torch.Tensor, overrides: Sequence[EmbeddingOverride] = (),
                   layer_idx: int | None = None, layer_norm_hidden: bool = False,
                   attention_mask: torch.Tensor | None = None,
                   position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """ids [B, T] -> the selected states [B, T, W] float32.

        `layer_idx`: None for the final normed output (ComfyUI's "last"), else block `layer_idx`'s
        output (negative counts from the end), through the final norm when `layer_norm_hidden`.
        `attention_mask` [B, T] (1 attend) masks keys besides the causal mask. `position_ids`
        [3, T]: M-RoPE positions (None: 0..T-1 on every axis, text).
        """
        if ids.dim() != 2:
            raise TokenizeError(f"qwen2.5-vl: token ids must be [batch, tokens], got shape {tuple(ids.shape)}")
        x = self.embed_ids(ids)
        if overrides:
            x = _apply_overrides(x, overrides)
        return self.encode_embeds(x, layer_idx, layer_norm_hidden, attention_mask, position_ids)

    def embed_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [B, T] -> input embeddings [B, T, W] float32."""
        return embed_tokens(self.token_embedding(), ids, self.config.vocab_size, "qwen2.5-vl")

    def encode_embeds(self, x: torch.Tensor, layer_idx: int | None = None, layer_norm_hidden: bool = False,
                      attention_mask: torch.Tensor | None = None,
                      position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Input embeddings x [B, T, W] -> the selected states [B, T, W] float32 (see `encode_ids`)."""
        length = x.shape[1]
        config = self.config
        if position_ids is None:
            cos, sin = rotary_tables(length, config.head_dim, config.rope_theta, x.device)  # [T, d]
        else:
            if position_ids.shape[-1] != length:
                raise Qwen25VLInputError(f"qwen2.5-vl: {position_ids.shape[-1]} positions for {length} tokens")
            cos, sin = mrope_tables(position_ids, config.head_dim, config.rope_theta, config.mrope_section, x.device)
        bias = attention_bias(attention_mask, length, x.device)  # [B or 1, 1, T, T]
        return run_to_layer(self, x.float(), cos, sin, bias, layer_idx, layer_norm_hidden)

    def _block(self, block: nn.Module, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               bias: torch.Tensor, cache: Any = None, layer: int = 0) -> torch.Tensor:
        """One Qwen2 decoder block (see the module doc): biased q/k/v, no q/k norm; with a cache,
        this step's keys and values join block `layer`'s entries."""
        return prenorm_block(block, x, cos, sin, bias, self.config, cache=cache, layer=layer)


def splice_images(tower: Any, row: Sequence[Any], name: str, extras: list | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor, list[tuple[int, int, torch.Tensor]]]:
    """One token row with image entries -> (input embeddings [1, T, W] float32 with each image's
    vision-tower tokens at its entry's place, the token mask [1, T], (start, count, grid) per
    image): ComfyUI's `process_tokens` with `preprocess_embed`, for the Qwen VL towers (`tower`:
    `width`, `special_tokens`, `embed_ids`, and `encode_image(IMAGE)` -> (tokens [N, W], grid[,
    extra]); each image's extra, when there is one, is appended to `extras`, Qwen3-VL's DeepStack
    features). `name` names the tower in errors."""
    plain = [token for token in row if not isinstance(token, dict)]
    ids, overrides = chunks_to_ids([plain], tower.width)
    x = tower.embed_ids(ids)  # [1, T, W]
    if overrides:
        x = apply_overrides(x, overrides, name)
    mask = token_mask([plain], tower.special_tokens["pad"])  # [1, T]
    images: list[tuple[int, int, torch.Tensor]] = []
    added = 0
    for index, entry in enumerate(row):
        if not isinstance(entry, dict):
            continue
        if entry.get("type") != "image":
            raise Qwen25VLInputError(f"{name}: a prompt entry of type {entry.get('type')!r}; this "
                                     "encoder takes images only")
        encoded = tower.encode_image(entry.get("data"))
        tokens_of_image, grid = encoded[0], encoded[1]  # [N, W], [1, 3]
        if extras is not None and len(encoded) > 2:
            extras.append(encoded[2])
        start = index + added  # ComfyUI's: the entry's place, shifted by the tokens added so far
        count = tokens_of_image.shape[0]
        x = torch.cat([x[:, :start], tokens_of_image[None].to(x.device), x[:, start:]], dim=1)
        mask = torch.cat([mask[:, :start], torch.ones(1, count, dtype=mask.dtype), mask[:, start:]], dim=1)
        images.append((start, count, grid))
        added += count - 1
    return x, mask, images


def _apply_overrides(embeds: torch.Tensor, overrides: Sequence[EmbeddingOverride]) -> torch.Tensor:
    """Input embeddings [B, T, W] with the given positions replaced by embedding vectors."""
    return apply_overrides(embeds, overrides, "qwen2.5-vl")
