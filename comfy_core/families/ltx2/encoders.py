"""LTX-2's text path: the Gemma 3 12B tower, the checkpoint's feature projection and (for LTX-2.0
checkpoints) its two text connectors, as ComfyUI's `comfy/text_encoders/lt.py` runs them for
LTXAVTextEncoderLoader (`LTXAVTEModel`, `LTXAVGemmaTokenizer`, `Gemma3_12BTokenizer`); written here.

- Tokens: the file's own SentencePiece model (`spiece_model`, what ComfyUI's Gemma 3 files carry
  and its loader hands on as `tokenizer_data`), `<bos>` first, no end token, prompt weights off,
  padded on the left with `<pad>` (0) to at least 1024 tokens, one chunk for any length; the raw
  prompt (ComfyUI's default `skip_template=True`), or `llama_template.format(prompt)`.
- Mask (ComfyUI's `SDClipModel.process_tokens`): the leading pads are 0, the rest 1.
- Encoding: every hidden state of the tower (embeddings, each block's output, the last one through
  the final norm), kept for the last `sum(mask)` tokens (the padding dropped, as ComfyUI slices
  `out[:, :, -sum(mask):]`); per sample and layer normalized over those tokens (`text.py`) and
  projected by `text_embedding_projection` to the caption width.
- Connectors: when the checkpoint's connectors take the projection's width and have at most two
  blocks (LTX-2.0; ComfyUI's "compat mode", its test being width 3840 = Gemma 3 12B's), the encoder
  runs them (`connector.py`, the network's own configuration) and the conditioning is
  `[1, T', 2 * width]` (video half, audio half). Otherwise the conditioning is the projected
  features with `unprocessed_ltxav_embeds` set, and the model runs its connectors on it
  (`conditions.py`, ComfyUI's `LTXAV.extra_conds`).
- No attention mask goes out with the conditioning (ComfyUI's LTXAVTEModel drops it), no pooled
  output.

The leading pads are not run through the tower: they are masked keys that no later token attends,
and Gemma's positions enter only through RoPE, which is relative, so the kept tokens' states do not
depend on them (tests/comfy_core/test_ltx2_family_text.py checks the equality); it saves running
1024 - N rows. LTX-2.3 checkpoints carry one projection per stream instead
(`text_embedding_projection.video_aggregate_embed` / `audio_aggregate_embed`, ComfyUI's
`DualLinearProjection`, `text.DualTextEmbeddingProjection`: per-token RMS features): the
conditioning is then `[1, N, video width + audio width]` with `unprocessed_ltxav_embeds`, and the
DiT splits it before its connectors. Not built: the image inputs of Gemma 3
(`<image_soft_token>`), refused with a typed error. ComfyUI's tokenizer
also maps the text `<end_of_turn>` to id 106 (and `<image_soft_token>` to 262144); here such text
is left to the SentencePiece model, which matters only for prompts that spell the chat markers.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from comfy_core.text_encoders.encoder_set import PAD_ZERO, EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.errors import TextEncoderError, TokenizeError
from comfy_core.text_encoders.gemma_tokenizer import SPIECE_KEY, GemmaSentencePiece, GemmaTokenizer
from comfy_core.text_encoders.qwen_tokenizer import NO_CHUNKING
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer

log = logging.getLogger(__name__)

GEMMA3_SLOT = "gemma3_12b"
GEMMA3_WIDTH = 3840  # Gemma 3 12B (the embedding width ComfyUI's tokenizer names)
LTXAV_MIN_LENGTH = 1024  # ComfyUI's Gemma3_12BTokenizer min_length
PAD_ID = 0
UNPROCESSED_KEY = "unprocessed_ltxav_embeds"
PROJECTION_KEYS = ("text_embedding_projection.aggregate_embed.weight", "text_embedding_projection.weight")
DUAL_PROJECTION_KEY = "text_embedding_projection.audio_aggregate_embed.bias"
DIFFUSION_PREFIX = "model.diffusion_model."
COMPAT_MAX_CONNECTOR_BLOCKS = 2
# ComfyUI's chat template for Gemma 3 when a template is asked for (skip_template=False).
SYSTEM_TEMPLATE = ("<start_of_turn>system\nYou are a helpful assistant.<end_of_turn>\n<start_of_turn>user\n"
                   "{}<end_of_turn>\n<start_of_turn>model\n")


class LTXAVTextEncoderError(TextEncoderError):
    """The files given to LTXAVTextEncoderLoader do not form LTX-2's text encoder (names the file
    and what is missing or does not fit)."""


class MissingGemma3TokenizerError(LTXAVTextEncoderError):
    """A Gemma 3 text-encoder file without its tokenizer (the `spiece_model` tensor)."""

    def __init__(self, source: str) -> None:
        super().__init__(f"{source}: this Gemma 3 text encoder file has no tokenizer (no {SPIECE_KEY!r} tensor); "
                         "use ComfyUI's repackaged gemma_3_12B_it*.safetensors, which carry it")


# --- tokenizer ---

class Gemma3Tokenizer(GemmaTokenizer):
    """ComfyUI's `Gemma3_12BTokenizer` (see the module doc): the Gemma tokenizer over the file's
    SentencePiece model, weights off, padded on the left to `min_length`."""

    def __init__(self, embedding_key: str = GEMMA3_SLOT, embedding_width: int = GEMMA3_WIDTH,
                 min_length: int | None = LTXAV_MIN_LENGTH, min_padding: int | None = None,
                 max_length: int = NO_CHUNKING, pad_token: int = PAD_ID, embedding_lookup: Any = None,
                 disable_weights: bool = True, backend: GemmaSentencePiece | None = None) -> None:
        super().__init__(embedding_key, embedding_width, min_length, min_padding, max_length, pad_token,
                         embedding_lookup, disable_weights, backend)
        self.pad_left = True

    def tokenize_with_weights(self, text: str, return_word_ids: bool = False, **kwargs: Any) -> list[list[tuple]]:
        if kwargs.get("image") is not None or kwargs.get("images"):
            raise TokenizeError("gemma3_12b: image inputs to the LTX-2 text encoder are not supported")
        template = kwargs.get("llama_template")
        skip = kwargs.get("skip_template", True) or text.startswith("<start_of_turn>")
        if not skip:
            text = (template or SYSTEM_TEMPLATE).format(text)
        options = kwargs.get("tokenizer_options") or {}
        min_length = kwargs.get("min_length", options.get(f"{self.embedding_key}_min_length", self.min_length))
        inner = {k: v for k, v in kwargs.items() if k not in ("min_length", "llama_template", "skip_template")}
        chunks = super().tokenize_with_weights(text, True, min_length=None, **inner)
        padded = []
        for chunk in chunks:
            missing = max(0, int(min_length or 0) - len(chunk))
            chunk = [(self.pad_token, 1.0, 0)] * missing + list(chunk)  # ComfyUI's pad_left
            padded.append(chunk if return_word_ids else [(t, w) for t, w, _ in chunk])
        return padded


class LTXAVGemmaTokenizer(FamilyTokenizer):
    """ComfyUI's `comfy.text_encoders.lt.LTXAVGemmaTokenizer` (tokens under "gemma3_12b")."""

    clip_name, clip = GEMMA3_SLOT, GEMMA3_SLOT

    def state_dict(self) -> dict:
        """The SentencePiece model, so a saved CLIP keeps its tokenizer (ComfyUI's Gemma3_Tokenizer)."""
        return getattr(self, GEMMA3_SLOT).state_dict()

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Generated ids -> text (ComfyUI's `SD1Tokenizer.decode`: the Gemma 3 tokenizer's)."""
        return getattr(self, GEMMA3_SLOT).decode(list(token_ids), skip_special_tokens=skip_special_tokens)


# --- the encoder ---

def leading_pads(ids: Sequence[int], pad: int = PAD_ID) -> int:
    """How many tokens at the start are padding (ComfyUI's left-pad mask rule)."""
    count = 0
    for token in ids:
        if token != pad:
            break
        count += 1
    return count


class LTXAVTEModel(TextEncoderSet):
    """ComfyUI's `comfy.text_encoders.lt.LTXAVTEModel`: the Gemma 3 tower as `gemma3_12b`, the
    feature projection as `text_embedding_projection`, and in LTX-2.0's compat mode the
    `video_embeddings_connector` / `audio_embeddings_connector` (see the module doc)."""

    compat_mode = False
    slot = GEMMA3_SLOT  # the tower's slot and token key (LTX-2.5's Gemma 4: "gemma4", gemma4_text.py)

    def attach(self, projection: torch.nn.Module, connectors: tuple[torch.nn.Module, torch.nn.Module] | None) -> None:
        self.text_embedding_projection = projection
        if connectors is not None:
            self.video_embeddings_connector, self.audio_embeddings_connector = connectors
            self.compat_mode = True

    def encode_token_weights(self, tokens: Mapping[str, Any], layer_idx: int | None = None,
                             projected_pooled: bool = True) -> tuple:
        """tokens {"gemma3_12b": [chunk]} -> (cond [1, T, W], None, extra); see the module doc."""
        slot = self.slot
        if slot not in tokens:
            raise TokenizeError(f"tokens for LTX-2's text encoder lack key {slot!r}; got keys {sorted(tokens)}")
        chunks = tokens[slot]
        if len(chunks) != 1:
            raise TokenizeError(f"LTX-2's text encoder takes one token chunk, got {len(chunks)}")
        ids = [pair[0] for pair in chunks[0]]
        if any(not isinstance(t, int) for t in ids):
            raise TokenizeError(f"{slot}: embeddings in the prompt are not supported by LTX-2's text encoder")
        start = leading_pads(ids)
        if start == len(ids):
            raise TokenizeError(f"{slot}: the prompt has no tokens (only padding)")
        tower = self.encoder(slot)
        device = tower.transformer.model.embed_tokens.weight.device
        kept = torch.tensor([ids[start:]], dtype=torch.long, device=device)  # [1, N]
        mask = torch.ones_like(kept)
        states = tower.hidden_states(kept, mask)  # L+1 x [1, N, D] float32
        out = self.text_embedding_projection(states, mask)  # [1, N, D]
        extra: dict[str, Any] = {}
        if self.compat_mode:
            video = self.video_embeddings_connector(out)[0]
            audio = self.audio_embeddings_connector(out)[0]
            out = torch.cat((video, audio), dim=-1)  # [1, N', 2D]
        else:
            extra[UNPROCESSED_KEY] = True
        return out.float(), None, extra


LTXAV_TEXT_ENCODERS = EncoderSetSpec(
    "ltxav", (EncoderOptions(GEMMA3_SLOT, GEMMA3_SLOT, PAD_ZERO, None, False, projected_pooled=False, kind="gemma3",
                             nominal_width=GEMMA3_WIDTH),),
    GEMMA3_SLOT, set_class=LTXAVTEModel, tokenizer_class=LTXAVGemmaTokenizer)


# --- loading (LTXAVTextEncoderLoader) ---

def _projection(checkpoint: Any, width: int, layers: int) -> torch.nn.Module:
    from comfy_core.families.ltx2.text import PROJECTION_PREFIX, TextEmbeddingProjection

    names = checkpoint.tensors
    if DUAL_PROJECTION_KEY in names:
        return _dual_projection(checkpoint, width, layers)
    key = next((k for k in PROJECTION_KEYS if k in names), None)
    if key is None:
        raise LTXAVTextEncoderError(f"{checkpoint.path}: no LTX-2 text projection ({PROJECTION_KEYS[0]!r}); "
                                    "ckpt_name must be an LTX-2 checkpoint")
    shape = tuple(names[key].shape)
    if shape != (width, width * layers):
        raise LTXAVTextEncoderError(f"{checkpoint.path}: {key} is {list(shape)}; the Gemma tower ({width} wide, "
                                    f"{layers} hidden states) needs [{width}, {width * layers}]")
    weight = checkpoint.read(key, torch.float32)
    return TextEmbeddingProjection.from_weights({PROJECTION_PREFIX + "aggregate_embed.weight": weight}, width=width)


def _dual_projection(checkpoint: Any, width: int, layers: int) -> torch.nn.Module:
    """LTX-2.3's per-stream projection (`text.DualTextEmbeddingProjection`), float32."""
    from comfy_core.families.ltx2.text import PROJECTION_PREFIX, DualTextEmbeddingProjection

    keys = [f"{PROJECTION_PREFIX}{side}_aggregate_embed.{part}" for side in ("video", "audio")
            for part in ("weight", "bias")]
    missing = [key for key in keys if key not in checkpoint.tensors]
    if missing:
        raise LTXAVTextEncoderError(f"{checkpoint.path}: LTX-2.3's text projection lacks {missing}")
    for key in keys[0::2]:
        shape = tuple(checkpoint.tensors[key].shape)
        if len(shape) != 2 or shape[1] != width * layers:
            raise LTXAVTextEncoderError(f"{checkpoint.path}: {key} is {list(shape)}; the Gemma tower ({width} "
                                        f"wide, {layers} hidden states) needs [*, {width * layers}]")
    try:
        return DualTextEmbeddingProjection.from_weights({k: checkpoint.read(k, torch.float32) for k in keys}, width)
    except (KeyError, ValueError) as exc:
        raise LTXAVTextEncoderError(f"{checkpoint.path}: {exc}") from None


def checkpoint_projection(checkpoint: Any, width: int, layers: int) -> tuple[torch.nn.Module, Any] | None:
    """(projection, compat-mode connectors or None) of an LTX-2 checkpoint for a `width`-wide tower
    with `layers` hidden states; None when the checkpoint has no text projection (the Gemma 4 path
    then reads the text-encoder file's own, gemma4_text.py)."""
    names = checkpoint.tensors
    if DUAL_PROJECTION_KEY not in names and not any(key in names for key in PROJECTION_KEYS):
        return None
    return _projection(checkpoint, width, layers), _compat_connectors(checkpoint, width)


def _compat_connectors(checkpoint: Any, width: int) -> tuple[torch.nn.Module, torch.nn.Module] | None:
    """The checkpoint's connectors when the encoder runs them (LTX-2.0; see the module doc), else None."""
    from comfy_core.families.ltx2.connector import build_connectors
    from comfy_core.families.ltx2.dit import LTXAVConfig, LTXAVConfigError

    names = checkpoint.tensors
    block = DIFFUSION_PREFIX + "audio_embeddings_connector.transformer_1d_blocks.{}.attn1.to_q.weight"
    if block.format(0) not in names or block.format(COMPAT_MAX_CONNECTOR_BLOCKS) in names:
        return None
    if tuple(names[block.format(0)].shape)[0] != width:
        return None
    try:
        config = LTXAVConfig.detect_from_weights(names, DIFFUSION_PREFIX, checkpoint.metadata)
    except LTXAVConfigError as exc:
        raise LTXAVTextEncoderError(f"{checkpoint.path}: {exc}") from None
    video, audio = build_connectors(config, None, {"device": "meta"})
    for side, module in (("video", video), ("audio", audio)):
        prefix = f"{DIFFUSION_PREFIX}{side}_embeddings_connector."
        wanted = module.state_dict()
        missing = [prefix + k for k in wanted if prefix + k not in names]
        if missing:
            raise LTXAVTextEncoderError(f"{checkpoint.path}: the {side} text connector lacks {missing[:3]}")
        module.load_state_dict({k: checkpoint.read(prefix + k, torch.float32) for k in wanted}, assign=True)
        module.eval()
    return video, audio


def _dequantizing_view(gemma_file: Any) -> Any:
    """The Gemma file as the tower's loader reads it: ComfyUI's quantised releases
    (`gemma_3_12B_it_fp4_mixed`: NVFP4 layers described by `comfy_quant` tensors or the
    `_quantization_metadata` header, `comfy_core/weights/quant_registry.py`) show each quantised
    weight dequantised to float, their scales hidden; a float file is returned as it is."""
    from comfy_core.weights.quant_registry import QuantFormatError, QuantizedHeader, quantized_layers

    try:
        layers = quantized_layers(gemma_file.tensors, gemma_file.metadata, gemma_file.read)
    except QuantFormatError as exc:
        raise LTXAVTextEncoderError(f"{gemma_file.path}: {exc}") from None
    return QuantizedHeader.for_detection(gemma_file, layers) if layers else gemma_file


def ltxav_gemma3_text_encoder(gemma_stored: Any, ltx_file: Any, dtype: torch.dtype | None = None,
                              load_device: str | None = None, offload_device: str = "cpu") -> Any:
    """LTXAVTextEncoderLoader on a Gemma 3 file: the open Gemma 3 file and LTX-2 checkpoint
    (`CheckpointFile`s) -> CLIP (see the module doc; `ltxav_loader.load_ltxav_text_encoder` picks
    this or the Gemma 4 path by the file).

    `dtype`: the tower's storage dtype (None: float32); the projection and connectors are float32.
    A quantised Gemma file (ComfyUI's `fp4_mixed` NVFP4 release) is dequantised as it is read.
    Raises `LTXAVTextEncoderError` (`MissingGemma3TokenizerError` for a file without its tokenizer)
    and the checkpoint reader's errors, naming the file.
    """
    from comfy_core.checkpoint.reader import LazyStateDict
    from comfy_core.text_encoders.clip import CLIP
    from comfy_core.text_encoders.gemma import GemmaDetectionError, GemmaKeyError
    from comfy_core.text_encoders.gemma3 import Gemma3Config, build_gemma3_encoder

    gemma_file = _dequantizing_view(gemma_stored)
    try:
        config = Gemma3Config.detect_from_weights(gemma_file.tensors, "")
    except GemmaDetectionError as exc:
        raise LTXAVTextEncoderError(f"{gemma_file.path}: {exc}") from None
    if config is None:
        raise LTXAVTextEncoderError(f"{gemma_file.path}: not a Gemma 3 text encoder (no "
                                    "'model.layers.0.self_attn.q_norm.weight'); LTX-2 needs Gemma 3 12B")
    if SPIECE_KEY not in gemma_file.tensors:
        raise MissingGemma3TokenizerError(str(gemma_file.path))
    backend = GemmaSentencePiece.from_data(gemma_file.read(SPIECE_KEY), f"{gemma_file.path}: {SPIECE_KEY}")
    projection = _projection(ltx_file, config.hidden_size, config.num_layers + 1)
    connectors = _compat_connectors(ltx_file, config.hidden_size)
    # Read on access (memory-mapped), floating tensors in `dtype`; the tokenizer key is skipped.
    state = LazyStateDict(gemma_file, dtype or torch.float32)
    try:
        tower = build_gemma3_encoder(config, state, dtype or torch.float32)
    except (GemmaKeyError, GemmaDetectionError) as exc:
        raise LTXAVTextEncoderError(f"{gemma_file.path}: {exc}") from None
    tower.eval()
    module = TextEncoderSet(LTXAV_TEXT_ENCODERS, {GEMMA3_SLOT: tower})
    module.attach(projection, connectors)
    tokenizer = LTXAVGemmaTokenizer({GEMMA3_SLOT: Gemma3Tokenizer(embedding_width=config.hidden_size, backend=backend)})
    log.info("LTX-2 text encoder: %s (Gemma 3, width %d x%d) + %s (projection%s)", Path(str(gemma_stored.path)).name,
             config.hidden_size, config.num_layers, Path(str(ltx_file.path)).name, ", connectors" if connectors else "")
    return CLIP.from_encoders(module, tokenizer, load_device, offload_device)


__all__ = ["GEMMA3_SLOT", "Gemma3Tokenizer", "LTXAVGemmaTokenizer", "LTXAVTEModel", "LTXAVTextEncoderError",
           "LTXAV_TEXT_ENCODERS", "MissingGemma3TokenizerError", "checkpoint_projection", "ltxav_gemma3_text_encoder"]
