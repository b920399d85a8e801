"""Token chunking: weighted segments -> 77-token chunks with per-token multipliers.

AUTOMATIC1111's `tokenize_line` (webui 1.10 `modules/sd_hijack_clip.py`), written here from
`shared/reference/a1111-prompt.md` section 3.3:

- 75 text tokens per chunk, then BOS in front and EOS at the end (77); short chunks are padded
  with EOS (an encoder padding with 0 rewrites everything after the first EOS, `pad_chunk_ids`);
- comma backtrack: when a chunk is full and its last comma is at most `comma_backtrack` tokens
  back, the tokens after that comma move to the next chunk (0 disables it);
- a `["BREAK", -1]` segment closes the current chunk, even an empty one;
- an embedding never straddles two chunks: when its V vectors do not fit, the chunk is closed
  first; its V positions hold the placeholder id 0 and a fix `(offset, embedding)` tells the
  encoder to overwrite them. As in webui, a backtrack that moves placeholders leaves the fix on
  the old chunk (reproduced for fidelity; section 3.3 "webui bug").

Each segment is tokenized on its own (so `photo(graph)` and `photograph` differ, as in webui).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from comfy_core.prompt.attention import BREAK_TEXT, BREAK_WEIGHT
from comfy_core.prompt.embedding import Embedding
from comfy_core.prompt.errors import EmbeddingError

CHUNK_TOKENS = 75  # text tokens per chunk; 77 with BOS and EOS
DEFAULT_COMMA_BACKTRACK = 20  # webui's "Prompt word wrap length limit"
PLACEHOLDER_ID = 0  # `!` in the CLIP vocabulary; overwritten by the embedding vectors


@dataclass(frozen=True)
class SpecialTokens:
    """The ids the chunker needs from a CLIP tokenizer (all CLIP BPE vocabularies agree on them)."""

    bos: int = 49406
    eos: int = 49407
    comma: int = 267  # vocab[",</w>"]


@dataclass
class Chunk:
    """One 77-token chunk: ids, per-token multipliers and embedding fixes `(offset, embedding)`.

    `offset` counts text positions (0 = first token after BOS), as webui's fixes do.
    """

    tokens: list[int]
    multipliers: list[float]
    fixes: list[tuple[int, Embedding]] = field(default_factory=list)


# A segment's tokens: ids, or an `Embedding` standing for itself (ComfyUI's `embedding:name`).
TokenItem = int | Embedding
Tokenize = Callable[[str], Sequence[TokenItem]]


class EmbeddingIndex:
    """Embeddings by the token ids of their names, for matching inside tokenized prompts.

    webui's rule (section 4.2): a name is tokenized without BOS/EOS and indexed by its first id;
    at each position the longest name starting with that id is tried first; the tokenizer
    lowercases, so matching is case-insensitive and on token boundaries. A later registration of
    the same name replaces the earlier one.
    """

    def __init__(self, embeddings: Sequence[Embedding], tokenize: Callable[[str], Sequence[int]]) -> None:
        by_name: dict[str, Embedding] = {}
        for embedding in embeddings:
            by_name[embedding.name] = embedding
        self._by_first: dict[int, list[tuple[tuple[int, ...], Embedding]]] = {}
        for embedding in by_name.values():
            ids = tuple(tokenize(embedding.name))
            if not ids:
                continue
            bucket = self._by_first.setdefault(ids[0], [])
            bucket.append((ids, embedding))
            bucket.sort(key=lambda entry: len(entry[0]), reverse=True)

    def __bool__(self) -> bool:
        return bool(self._by_first)

    def match(self, items: Sequence[TokenItem], position: int) -> tuple[Embedding | None, int]:
        """The embedding whose name starts at `items[position]`, and how many tokens it spans."""
        first = items[position]
        if isinstance(first, Embedding):
            return first, 1
        for ids, embedding in self._by_first.get(first, ()):
            if tuple(items[position:position + len(ids)]) == ids:
                return embedding, len(ids)
        return None, 0


@dataclass
class _ChunkBuilder:
    special: SpecialTokens
    chunks: list[Chunk] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    multipliers: list[float] = field(default_factory=list)
    fixes: list[tuple[int, Embedding]] = field(default_factory=list)
    last_comma: int = -1
    token_count: int = 0

    def close(self, is_last: bool = False) -> None:
        self.token_count += len(self.tokens) if is_last else CHUNK_TOKENS
        pad = CHUNK_TOKENS - len(self.tokens)
        tokens = [self.special.bos, *self.tokens, *[self.special.eos] * pad, self.special.eos]
        multipliers = [1.0, *self.multipliers, *[1.0] * pad, 1.0]
        self.chunks.append(Chunk(tokens, multipliers, self.fixes))
        self.tokens, self.multipliers, self.fixes = [], [], []
        self.last_comma = -1


def tokenize_segments(segments: Sequence[Sequence], tokenize: Tokenize, *,
                      special: SpecialTokens = SpecialTokens(),
                      embeddings: EmbeddingIndex | None = None,
                      comma_backtrack: int = DEFAULT_COMMA_BACKTRACK) -> tuple[list[Chunk], int]:
    """Chunk `[text, weight]` segments (from `parse_prompt_attention`); returns `(chunks, token_count)`.

    `token_count` is webui's count (75 per closed chunk plus the real tokens of the last one).
    """
    if not 0 <= comma_backtrack < CHUNK_TOKENS:
        raise ValueError(f"comma_backtrack must be in 0..{CHUNK_TOKENS - 1}, got {comma_backtrack}")
    state = _ChunkBuilder(special)
    for text, weight in segments:
        if text == BREAK_TEXT and weight == BREAK_WEIGHT:
            state.close()
            continue
        items = tokenize(text)
        position = 0
        while position < len(items):
            token = items[position]
            if token == special.comma:
                state.last_comma = len(state.tokens)
            elif (comma_backtrack and len(state.tokens) == CHUNK_TOKENS and state.last_comma != -1
                  and CHUNK_TOKENS - state.last_comma <= comma_backtrack):
                cut = state.last_comma + 1
                moved_tokens, moved_multipliers = state.tokens[cut:], state.multipliers[cut:]
                del state.tokens[cut:], state.multipliers[cut:]
                state.close()
                state.tokens, state.multipliers = moved_tokens, moved_multipliers
            if len(state.tokens) == CHUNK_TOKENS:
                state.close()
            embedding, span = embeddings.match(items, position) if embeddings is not None else (None, 0)
            if embedding is None and isinstance(token, Embedding):
                embedding, span = token, 1
            if embedding is None:
                state.tokens.append(token)
                state.multipliers.append(weight)
                position += 1
                continue
            count = embedding.vector_count
            if count > CHUNK_TOKENS:
                # webui would build an over-long chunk and fail inside the encoder.
                raise EmbeddingError(f"embedding {embedding.name!r} has {count} vectors; at most "
                                     f"{CHUNK_TOKENS} fit in one chunk")
            if len(state.tokens) + count > CHUNK_TOKENS:
                state.close()
            state.fixes.append((len(state.tokens), embedding))
            state.tokens.extend([PLACEHOLDER_ID] * count)
            state.multipliers.extend([weight] * count)
            position += span
    if state.tokens or not state.chunks:
        state.close(is_last=True)
    return state.chunks, state.token_count


def empty_chunk(special: SpecialTokens = SpecialTokens()) -> Chunk:
    """BOS then 76 EOS, all multipliers 1: what pads a text with fewer chunks than its batch."""
    return Chunk([special.bos] + [special.eos] * (CHUNK_TOKENS + 1), [1.0] * (CHUNK_TOKENS + 2), [])


def pad_chunk_ids(tokens: Sequence[int], eos: int, pad: int) -> list[int]:
    """Rewrite every id after the first EOS to `pad` (OpenCLIP encoders pad with 0, not EOS)."""
    if pad == eos or eos not in tokens:
        return list(tokens)
    first = list(tokens).index(eos)
    return list(tokens[:first + 1]) + [pad] * (len(tokens) - first - 1)
