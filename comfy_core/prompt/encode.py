"""Encoding AUTOMATIC1111 prompts with our CLIP encoders: texts -> `[B, 77*n, C]` and pooled.

Behaviour of webui 1.10 `modules/sd_hijack_clip.py::forward/process_tokens`,
`modules/sd_hijack_open_clip.py` and `modules/sd_models_xl.py`, written here from
`shared/reference/a1111-prompt.md` sections 3.5-3.7:

- every text of one batch (the schedule variants of one prompt) is chunked; texts with fewer
  chunks get empty chunks up to the batch's largest count;
- chunk index i is encoded for the whole batch at once; emphasis applies to that batch tensor
  (so "Original"'s mean is shared across the batch rows and taken per chunk, not overall);
- the layer used follows webui per family (`encoder_plan`), not ComfyUI: SD1 honours clip skip
  (`CLIPSetLastLayer`; `hidden_states[-N]` then the final layer norm); SD2 always uses the
  penultimate layer through the final norm (webui ignores clip skip there); SDXL uses the
  penultimate layer of CLIP-L and CLIP-G without the final norm (clip skip ignored), channels
  concatenated (768 + 1280), pooled from CLIP-G's first chunk (not affected by emphasis);
- an SDXL negative prompt whose batch is all empty is zeros, context and pooled alike.

The CLIP object is used through a narrow surface: `clip.patcher` (a `ClipPatcher`:
`encoder_slots()`, `applied()`), `clip.tokenizer.clip_tokenizer.encode(text)` and `clip.layer_idx`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from comfy_core.prompt.attention import parse_prompt_attention
from comfy_core.prompt.chunking import (CHUNK_TOKENS, DEFAULT_COMMA_BACKTRACK, Chunk, EmbeddingIndex,
                                        SpecialTokens, TokenItem, empty_chunk, pad_chunk_ids,
                                        tokenize_segments)
from comfy_core.prompt.embedding import Embedding
from comfy_core.prompt.emphasis import DEFAULT_EMPHASIS, apply_emphasis, parses_brackets
from comfy_core.prompt.errors import EmbeddingNotFoundError

EMBEDDING_PREFIX = "embedding:"  # ComfyUI's explicit syntax, `embedding:name`
_EXPLICIT = re.compile(r"(?<!\S)embedding:(\S+)")

# (name) -> the embedding, or None when no file has that name.
ResolveEmbedding = Callable[[str], "Embedding | None"]


@dataclass(frozen=True)
class EncoderPlan:
    """How one encoder of the set is used: its padding id, layer and final-norm choice."""

    slot: str  # "clip_l" | "clip_h" | "clip_g"
    pad: int
    layer_idx: int | None  # None: final output; negative: that hidden layer (ComfyUI's indexing)
    layer_norm: bool


def encoder_plan(slots: Sequence[str], clip_layer: int | None) -> list[EncoderPlan]:
    """webui's per-family layer choice (reference 3.7) for the encoders present.

    `clip_layer` is the CLIP's `layer_idx` (None or -N for "clip skip N"); only SD1 uses it.
    """
    slots = list(slots)
    eos = SpecialTokens().eos
    if slots == ["clip_l"]:  # SD1.x
        return [EncoderPlan("clip_l", eos, clip_layer, True)]
    if slots == ["clip_h"]:  # SD2.x: penultimate, through ln_final
        return [EncoderPlan("clip_h", 0, -2, True)]
    plans = []
    for slot in slots:  # SDXL base (clip_l + clip_g) or refiner (clip_g): penultimate, no norm
        if slot not in ("clip_l", "clip_g"):
            raise ValueError(f"unsupported text encoder set {slots}: expected clip_l, clip_h, clip_l+clip_g or clip_g")
        plans.append(EncoderPlan(slot, eos if slot == "clip_l" else 0, -2, False))
    if not plans:
        raise ValueError("the CLIP has no text encoders")
    return plans


@dataclass(frozen=True)
class EncodedTexts:
    cond: torch.Tensor  # [B, 77 * chunks, sum of widths]
    pooled: torch.Tensor  # [B, P]: from the pooling encoder's first chunk
    token_counts: tuple[int, ...]  # webui's token count per text


def explicit_tokenizer(encode: Callable[[str], list[int]], resolve: ResolveEmbedding | None) -> Callable[[str], list[TokenItem]]:
    """A tokenizer that also turns ComfyUI's `embedding:name` words into `Embedding` items.

    As ComfyUI, a name not found is retried without trailing commas (kept as text). A name that
    still names no file is an `EmbeddingNotFoundError` (ComfyUI only warns and drops the word).
    """
    def tokenize(text: str) -> list[TokenItem]:
        if resolve is None or EMBEDDING_PREFIX not in text:
            return encode(text)
        items: list[TokenItem] = []
        last = 0
        for match in _EXPLICIT.finditer(text):
            items.extend(encode(text[last:match.start()]))
            name = match.group(1)
            embedding = resolve(name)
            leftover = ""
            if embedding is None and name.rstrip(","):
                stripped = name.rstrip(",")
                embedding, leftover = resolve(stripped), name[len(stripped):]
            if embedding is None:
                raise EmbeddingNotFoundError(f"prompt names embedding:{name}, but no embedding file "
                                             f"of that name is in the embeddings folders")
            items.append(embedding)
            items.extend(encode(leftover))
            last = match.end()
        items.extend(encode(text[last:]))
        return items
    return tokenize


def chunk_texts(texts: Sequence[str], tokenize: Callable[[str], Sequence[TokenItem]], *,
                emphasis: str = DEFAULT_EMPHASIS, embeddings: EmbeddingIndex | None = None,
                comma_backtrack: int = DEFAULT_COMMA_BACKTRACK) -> tuple[list[list[Chunk]], list[int]]:
    """Chunk each text, padded with empty chunks to the batch's largest chunk count."""
    per_text, counts = [], []
    for text in texts:
        segments = parse_prompt_attention(text) if parses_brackets(emphasis) else [[text, 1.0]]
        chunks, count = tokenize_segments(segments, tokenize, embeddings=embeddings,
                                          comma_backtrack=comma_backtrack)
        per_text.append(chunks)
        counts.append(count)
    longest = max(len(chunks) for chunks in per_text)
    for chunks in per_text:
        chunks.extend(empty_chunk() for _ in range(longest - len(chunks)))
    return per_text, counts


def embedding_overrides(chunks: Sequence[Chunk], slot: str, width: int, override_type: Any) -> list:
    """Per-row overrides for one chunk index: fix `(offset, emb)` replaces rows `offset+1 ...`.

    At most `77 - offset - 1` vectors are written (webui's `EmbeddingsWithFixes`), which matters
    for fixes left on a chunk by a comma backtrack.
    """
    overrides = []
    for row, chunk in enumerate(chunks):
        for offset, embedding in chunk.fixes:
            count = min(CHUNK_TOKENS + 2 - offset - 1, embedding.vector_count)
            if count <= 0:
                continue
            vectors = embedding.vectors_for(slot, width)[:count]
            overrides.append(override_type(row=row, position=offset + 1, vectors=vectors))
    return overrides


def encode_texts(clip: Any, texts: Sequence[str], *, emphasis: str = DEFAULT_EMPHASIS,
                 embeddings: Sequence[Embedding] = (), resolve: ResolveEmbedding | None = None,
                 comma_backtrack: int = DEFAULT_COMMA_BACKTRACK, zero_if_empty: bool = False) -> EncodedTexts:
    """Encode `texts` as one webui batch (see the module docstring).

    `zero_if_empty`: the SDXL empty-negative rule (applied only to SDXL encoder sets).
    """
    from comfy_core.text_encoders.encoder import EmbeddingOverride

    if not texts:
        raise ValueError("encode_texts needs at least one text")
    encode = clip.tokenizer.clip_tokenizer.encode
    index = EmbeddingIndex(list(embeddings), encode) if embeddings else None
    tokenize = explicit_tokenizer(encode, resolve)
    per_text, counts = chunk_texts(texts, tokenize, emphasis=emphasis, embeddings=index,
                                   comma_backtrack=comma_backtrack)
    plans = encoder_plan(clip.patcher.encoder_slots(), getattr(clip, "layer_idx", None))
    pooling_slot = "clip_g" if any(p.slot == "clip_g" for p in plans) else plans[0].slot
    conds: list[torch.Tensor] = []
    pooled = None
    with clip.patcher.applied() as encoders, torch.no_grad():
        for plan in plans:
            encoder = getattr(encoders, plan.slot)
            per_chunk = []
            for i in range(len(per_text[0])):
                chunks = [text_chunks[i] for text_chunks in per_text]
                ids = torch.tensor([pad_chunk_ids(c.tokens, SpecialTokens().eos, plan.pad) for c in chunks])  # [B, 77]
                multipliers = torch.tensor([c.multipliers for c in chunks], dtype=torch.float32)  # [B, 77]
                overrides = embedding_overrides(chunks, plan.slot, encoder.width, EmbeddingOverride)
                out = encoder.encode_ids(ids, overrides, layer_idx=plan.layer_idx, layer_norm_hidden=plan.layer_norm)
                per_chunk.append(apply_emphasis(out.hidden, multipliers.to(out.hidden.device), emphasis))
                if i == 0 and plan.slot == pooling_slot:
                    pooled = out.pooled  # [B, P]
            conds.append(torch.cat(per_chunk, dim=1))  # [B, 77 * chunks, width]
    cond = torch.cat(conds, dim=2)  # [B, 77 * chunks, sum of widths]
    is_sdxl = pooling_slot == "clip_g"
    if zero_if_empty and is_sdxl and all(text == "" for text in texts):
        cond, pooled = torch.zeros_like(cond), torch.zeros_like(pooled)
    return EncodedTexts(cond=cond, pooled=pooled, token_counts=tuple(counts))
