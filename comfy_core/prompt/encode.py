"""Encoding AUTOMATIC1111 prompts with our CLIP encoders: texts -> `[B, 77*n, C]` and pooled.

Behaviour of webui 1.10 `modules/sd_hijack_clip.py::forward/process_tokens`,
`modules/sd_hijack_open_clip.py` and `modules/sd_models_xl.py`, written here from
`shared/reference/a1111-prompt.md` sections 3.5-3.7:

- one batch is every row of one (sub)prompt's schedule, repeats included (webui's
  `get_learned_conditioning` passes all of them to one encoder call); each distinct text is
  tokenized and encoded once, and "Original"'s mean, shared across the batch rows and taken per
  chunk index, counts each text as often as it occurs in the batch (`emphasis.batch_mean`);
- texts are tokenized as webui's tokenizer for each encoder does (`webui_tokenizer`: ftfy
  cleaning; transformers' rules for CLIP-L, open_clip's for ViT-H and CLIP-G), so SDXL's two
  encoders may see different ids; embedding names are matched with the first encoder's ids;
- texts with fewer chunks get empty chunks up to the batch's largest count (across both SDXL
  encoders: where their cleanings give different counts webui fails; here the shorter is padded);
- the layer used follows webui per family (`encoder_plan`), not ComfyUI: SD1 honours clip skip
  (`CLIPSetLastLayer`; `hidden_states[-N]` then the final layer norm); SD2 always uses the
  penultimate layer through the final norm (webui ignores clip skip there); SDXL uses the
  penultimate layer of CLIP-L and CLIP-G without the final norm (clip skip ignored), channels
  concatenated (768 + 1280), pooled from CLIP-G's first chunk (not affected by emphasis);
- an SDXL negative prompt whose batch is all empty is zeros, context and pooled alike.

The CLIP object is used through a narrow surface: `clip.patcher` (a `ClipPatcher`:
`encoder_slots(patcher)`, `applied()`), `clip.tokenizer.clip_tokenizer` (a `ClipTokenizer`: its BPE
through `encode_words`) and `clip.layer_idx`.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from comfy_core.patching.clip import encoder_slots
from comfy_core.prompt.attention import parse_prompt_attention
from comfy_core.prompt.chunking import (CHUNK_TOKENS, DEFAULT_COMMA_BACKTRACK, Chunk, EmbeddingIndex,
                                        SpecialTokens, TokenItem, empty_chunk, pad_chunk_ids,
                                        tokenize_segments)
from comfy_core.prompt.embedding import Embedding
from comfy_core.prompt.emphasis import DEFAULT_EMPHASIS, apply_emphasis, parses_brackets
from comfy_core.prompt.errors import EmbeddingNotFoundError
from comfy_core.prompt.webui_tokenizer import Flavour, webui_tokenizer

EMBEDDING_PREFIX = "embedding:"  # ComfyUI's explicit syntax, `embedding:name`
_EXPLICIT = re.compile(r"(?<!\S)embedding:(\S+)")

# (name) -> the embedding, or None when no file has that name.
ResolveEmbedding = Callable[[str], "Embedding | None"]


@dataclass(frozen=True)
class EncoderPlan:
    """How one encoder of the set is used: its padding id, layer, final-norm choice and tokenizer."""

    slot: str  # "clip_l" | "clip_h" | "clip_g"
    pad: int
    layer_idx: int | None  # None: final output; negative: that hidden layer (ComfyUI's indexing)
    layer_norm: bool
    tokenizer: Flavour = "transformers"  # webui: transformers' for CLIP-L, open_clip's otherwise


def encoder_plan(slots: Sequence[str], clip_layer: int | None, spec: Any) -> list[EncoderPlan]:
    """webui's per-family layer choice (reference 3.7) for the encoders present, from the encoder
    set's `webui_*` options (`spec`: the CLIP's `EncoderSetSpec`).

    `clip_layer` is the CLIP's `layer_idx` (None or -N for "clip skip N"); it is used where the
    set's `webui_layer_idx` is None (SD1).
    """
    slots = list(slots)
    if not slots:
        raise ValueError("the CLIP has no text encoders")
    if spec is None:
        raise ValueError(f"unsupported text encoder set {slots}: the CLIP names no encoder set")
    plans = []
    for slot in slots:
        options = spec.options(slot)
        if options.kind != "clip":
            raise ValueError(f"AUTOMATIC1111 prompt encoding runs CLIP text encoders only; the {spec.name} set's "
                             f"{slot} is a {options.kind} encoder (use CLIPTextEncode)")
        layer = clip_layer if options.webui_layer_idx is None else options.webui_layer_idx
        plans.append(EncoderPlan(slot, options.pad_token, layer, options.webui_layer_norm, options.webui_tokenizer))
    return plans


@dataclass(frozen=True)
class EncodedTexts:
    """One encoded batch: a row per distinct text, in order of first appearance (`texts`)."""

    cond: torch.Tensor  # [D, 77 * chunks, sum of widths]
    pooled: torch.Tensor  # [D, P]: from the pooling encoder's first chunk
    token_counts: tuple[int, ...]  # webui's token count per distinct text
    texts: tuple[str, ...] = ()

    def row(self, text: str) -> int:
        """The row of `text` in `cond` and `pooled`."""
        return self.texts.index(text)


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


def pad_chunk_counts(per_text_sets: Sequence[list[list[Chunk]]]) -> None:
    """Give every text of every set as many chunks as the longest (empty chunks at the end)."""
    longest = max(len(chunks) for per_text in per_text_sets for chunks in per_text)
    for per_text in per_text_sets:
        for chunks in per_text:
            chunks.extend(empty_chunk() for _ in range(longest - len(chunks)))


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
    pad_chunk_counts([per_text])
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
    """Encode `texts` as one webui batch, repeats included (see the module docstring).

    The result has one row per distinct text (`EncodedTexts.row`); a text given twice counts
    twice in "Original"'s mean, as in webui. `zero_if_empty`: the SDXL empty-negative rule
    (applied only to encoder sets that declare it: SDXL's).
    """
    from comfy_core.text_encoders.encoder import EmbeddingOverride

    if not texts:
        raise ValueError("encode_texts needs at least one text")
    occurrences = Counter(texts)
    distinct = list(occurrences)  # first-appearance order
    repeats = (torch.tensor([occurrences[text] for text in distinct], dtype=torch.float32)
               if len(distinct) < len(texts) else None)
    spec = getattr(getattr(clip, "cond_stage_model", None), "spec", None)
    plans = encoder_plan(encoder_slots(clip.patcher), getattr(clip, "layer_idx", None), spec)
    bpe = clip.tokenizer.clip_tokenizer
    tokenizers = {plan.tokenizer: webui_tokenizer(bpe, plan.tokenizer) for plan in plans}
    # webui registers embedding names with the first encoder's tokenizer (sd_models_xl.tokenize).
    index = EmbeddingIndex(list(embeddings), tokenizers[plans[0].tokenizer]) if embeddings else None
    chunked = {flavour: chunk_texts(distinct, explicit_tokenizer(tokenize, resolve), emphasis=emphasis,
                                    embeddings=index, comma_backtrack=comma_backtrack)
               for flavour, tokenize in tokenizers.items()}
    pad_chunk_counts([per_text for per_text, _ in chunked.values()])
    counts = chunked[plans[0].tokenizer][1]
    pooling_slot = spec.pooled_from
    conds: list[torch.Tensor] = []
    pooled = None
    with clip.patcher.applied() as encoders, torch.no_grad():
        for plan in plans:
            encoder = getattr(encoders, plan.slot)
            per_text = chunked[plan.tokenizer][0]
            per_chunk = []
            for i in range(len(per_text[0])):
                chunks = [text_chunks[i] for text_chunks in per_text]
                ids = torch.tensor([pad_chunk_ids(c.tokens, SpecialTokens().eos, plan.pad) for c in chunks])  # [D, 77]
                multipliers = torch.tensor([c.multipliers for c in chunks], dtype=torch.float32)  # [D, 77]
                overrides = embedding_overrides(chunks, plan.slot, encoder.width, EmbeddingOverride)
                out = encoder.encode_ids(ids, overrides, layer_idx=plan.layer_idx, layer_norm_hidden=plan.layer_norm)
                per_chunk.append(apply_emphasis(out.hidden, multipliers.to(out.hidden.device), emphasis, repeats))
                if i == 0 and plan.slot == pooling_slot:
                    pooled = out.pooled  # [D, P]
            conds.append(torch.cat(per_chunk, dim=1))  # [D, 77 * chunks, width]
    cond = torch.cat(conds, dim=2)  # [D, 77 * chunks, sum of widths]
    if zero_if_empty and spec.webui_zero_empty_negative and all(text == "" for text in texts):
        cond, pooled = torch.zeros_like(cond), torch.zeros_like(pooled)
    return EncodedTexts(cond=cond, pooled=pooled, token_counts=tuple(counts), texts=tuple(distinct))
