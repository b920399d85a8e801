"""ComfyUI-style tokenization: weighted prompt -> 77-token chunks of (token, weight) per encoder.

Behaviour re-implemented from ComfyUI's `comfy/sd1_clip.py` (`SDTokenizer.tokenize_with_weights`,
`SD1Tokenizer`, `comfy/sdxl_clip.py: SDXLTokenizer`):

1. The prompt is parsed into weighted segments (`prompt_weights.parse_weights`).
2. Each segment is cut at ` embedding:` / newline-`embedding:` boundaries; a piece that starts with
   `embedding:NAME` is looked up (when an embedding lookup is configured: checkpoint loaders set
   one over the embeddings folders, `embedding_files.FolderEmbeddingLookup`); NAME is the first
   word, retried without trailing commas (`embedding:name,` is how users write it), the commas
   then kept as text; a found embedding contributes its vectors as tokens, the rest of the piece
   is tokenized as text.
3. Each piece becomes a token group. Groups are packed into chunks of BOS + up to 75 tokens + EOS,
   padded to 77. A group that does not fit in the current chunk moves whole to the next chunk
   unless it is "large" (>= 8 tokens), in which case it is split at the boundary.
4. Padding is per encoder: SD1/SDXL CLIP-L pad with EOS (49407), the OpenCLIP encoders (SD2 ViT-H,
   SDXL bigG) pad with 0 (`!`), as they were trained.

Tokens are ints, or 1-D embedding vectors (textual inversion) of the encoder's width.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, Callable

from comfy_core.text_encoders.errors import TokenizeError
from comfy_core.text_encoders.prompt_weights import escape_important, parse_weights, unescape_important
from comfy_core.text_encoders.tokenizer import ClipTokenizer

log = logging.getLogger(__name__)

EMBEDDING_IDENTIFIER = "embedding:"
CHUNK_LENGTH = 77
# Groups at least this long may be split across chunks; shorter ones move whole (keeps words intact).
MAX_WORD_LENGTH = 8

# lookup(name, embedding_key, width) -> tensor [n, width] or [width], or None when unknown.
EmbeddingLookup = Callable[[str, str, int], Any]


@dataclass(frozen=True)
class TokenizerSpec:
    """How one encoder tokenizes: its key in the token dict, pad id and embedding width."""

    key: str  # ComfyUI's token-dict key: "l", "h" or "g"
    pad_token: int
    embedding_width: int
    embedding_key: str  # "clip_l" | "clip_h" | "clip_g": which part of an SDXL embedding file to use
    max_length: int = CHUNK_LENGTH
    min_length: int | None = None


class SDTokenizer:
    """One encoder's tokenizer with ComfyUI's `tokenize_with_weights` API."""

    def __init__(self, clip_tokenizer: ClipTokenizer, spec: TokenizerSpec,
                 embedding_lookup: EmbeddingLookup | None = None) -> None:
        self.clip_tokenizer = clip_tokenizer
        self.spec = spec
        self.embedding_lookup = embedding_lookup
        self.start_token = clip_tokenizer.bos_id
        self.end_token = clip_tokenizer.eos_id
        self.pad_token = spec.pad_token
        self.max_length = spec.max_length
        self.min_length = spec.min_length
        self.max_word_length = MAX_WORD_LENGTH
        self.embedding_identifier = EMBEDDING_IDENTIFIER
        self.embedding_key = spec.embedding_key
        # ComfyUI's SDTokenizer instance attributes (comfy/sd1_clip.py), which packs read from
        # the instance (smZNodes copies `vars(tokenizer)` into its own prompt engines):
        # `tokenizer` is the transformers CLIPTokenizer (`get_vocab`, `__call__`,
        # `convert_tokens_to_string`), built when a pack first uses it; CLIP tokenizers add BOS
        # and EOS, pad every chunk to 77.
        self.tokenizer = clip_tokenizer.lazy_backend
        self.tokens_start = 1
        self.tokenizer_adds_end_token = True
        self.pad_with_end = spec.pad_token == clip_tokenizer.eos_id
        self.pad_to_max_length = True
        self.min_padding = None
        self.embedding_size = spec.embedding_width
        self.inv_vocab = clip_tokenizer.inverse_vocab
        self.embedding_directory = _embedding_directory(embedding_lookup)

    def with_embedding_lookup(self, lookup: EmbeddingLookup | None) -> "SDTokenizer":
        return SDTokenizer(self.clip_tokenizer, self.spec, lookup)

    def _try_get_embedding(self, embedding_name: str) -> tuple[Any, str]:
        """ComfyUI's `SDTokenizer._try_get_embedding`: (the vectors of the embedding the first
        word names, or None; the rest of the text). Without an embedding lookup nothing is found."""
        if self.embedding_lookup is None:
            words = embedding_name.split()
            return None, " ".join(words[1:])
        return self._find_embedding(embedding_name)

    def state_dict(self) -> dict:
        """ComfyUI's `SDTokenizer.state_dict`: CLIP tokenizers save nothing."""
        return {}

    def tokenize_with_weights(self, text: str, return_word_ids: bool = False, **kwargs: Any) -> list[list[tuple]]:
        """Chunks of `(token, weight)` (or `(token, weight, word_id)`), each `max_length` long."""
        escaped = escape_important(text)
        segments = [(escaped, 1.0)] if kwargs.get("disable_weights", False) else parse_weights(escaped)
        groups: list[list[tuple[Any, float]]] = []
        for segment, weight in segments:
            for piece in _split_embeddings(unescape_important(segment)):
                groups.extend(self._piece_groups(piece, weight))
        options = kwargs.get("tokenizer_options") or {}
        min_length = options.get(f"{self.embedding_key}_min_length", self.min_length)
        return self._pack(groups, return_word_ids, min_length)

    def untokenize(self, token_weight_pair: list[tuple]) -> list[tuple]:
        return [(pair, self.clip_tokenizer.token_text(pair[0])) for pair in token_weight_pair]

    def _piece_groups(self, piece: str, weight: float) -> list[list[tuple[Any, float]]]:
        return embedding_piece_groups(piece, weight, self.embedding_lookup is not None, self._find_embedding,
                                      self.clip_tokenizer.encode, self.spec.embedding_key, self.spec.embedding_width)

    def _find_embedding(self, name: str) -> tuple[Any, str]:
        return find_embedding(self.embedding_lookup, name, self.embedding_key, self.spec.embedding_width)

    def _pack(self, groups: list[list[tuple[Any, float]]], return_word_ids: bool,
              min_length: int | None = None) -> list[list[tuple]]:
        limit = self.max_length - 1  # room for EOS
        chunks: list[list[tuple]] = []
        chunk: list[tuple] = [(self.start_token, 1.0, 0)]
        chunks.append(chunk)
        for word_id, group in enumerate(groups, start=1):
            is_large = len(group) >= self.max_word_length
            remaining_group = group
            while remaining_group:
                if len(remaining_group) + len(chunk) > limit:
                    room = limit - len(chunk)
                    if is_large:
                        chunk.extend((t, w, word_id) for t, w in remaining_group[:room])
                        chunk.append((self.end_token, 1.0, 0))
                        remaining_group = remaining_group[room:]
                    else:
                        chunk.append((self.end_token, 1.0, 0))
                        chunk.extend([(self.pad_token, 1.0, 0)] * room)
                    chunk = [(self.start_token, 1.0, 0)]
                    chunks.append(chunk)
                else:
                    chunk.extend((t, w, word_id) for t, w in remaining_group)
                    remaining_group = []
        chunk.append((self.end_token, 1.0, 0))
        if len(chunk) < self.max_length:
            chunk.extend([(self.pad_token, 1.0, 0)] * (self.max_length - len(chunk)))
        if min_length is not None and len(chunk) < min_length:
            chunk.extend([(self.pad_token, 1.0, 0)] * (min_length - len(chunk)))
        if not return_word_ids:
            return [[(t, w) for t, w, _ in c] for c in chunks]
        return chunks


def _embedding_directory(lookup: EmbeddingLookup | None) -> list[str] | None:
    """ComfyUI's `embedding_directory` for a lookup over folders (its `folders`), else None."""
    folders = getattr(lookup, "folders", None)
    return None if folders is None else [str(folder) for folder in folders]


def _split_embeddings(text: str) -> list[str]:
    """Cut text before every ` embedding:` / newline-`embedding:`, keeping the identifier on the piece."""
    parts = re.split(" {0}|\n{0}".format(re.escape(EMBEDDING_IDENTIFIER)), text)
    pieces = [parts[0]] + [EMBEDDING_IDENTIFIER + p for p in parts[1:]]
    return [p for p in pieces if p != ""]


# Tokenizer options (CLIP.set_tokenizer_option) our tokenizers honour, per encoder's embedding key.
TOKENIZER_OPTIONS = ("{key}_min_length", "{key}_min_padding")


def find_embedding(lookup: "EmbeddingLookup", name: str, key: str, width: int) -> tuple[Any, str]:
    """Look `name` up (ComfyUI's `_try_get_embedding`): only the first whitespace-separated word is
    the name, the rest is tokenized as text; retried without trailing commas, kept as leftover."""
    words = name.split()
    word = words[0] if words else ""
    leftover = " ".join(words[1:])
    found = lookup(word, key, width)
    if found is None:
        stripped = word.strip(",")
        if len(stripped) < len(word):
            found = lookup(stripped, key, width)
            leftover = f"{word[len(stripped):]} {leftover}"
    return found, leftover


def embedding_piece_groups(piece: str, weight: float, embeddings_enabled: bool,
                           find: Callable[[str], tuple[Any, str]], encode: Callable[[str], list[int]],
                           key: str, width: int) -> list[list[tuple[Any, float]]]:
    """The token groups of one prompt piece: an `embedding:NAME` piece's vectors (one group) and
    its leftover text, or the piece's token ids; ComfyUI's `tokenize_with_weights` word loop.
    An unknown embedding is dropped with a warning, as ComfyUI does."""
    groups: list[list[tuple[Any, float]]] = []
    if piece.startswith(EMBEDDING_IDENTIFIER) and embeddings_enabled:
        name = piece[len(EMBEDDING_IDENTIFIER):].strip("\n")
        vectors, leftover = find(name)
        if vectors is None:
            log.warning("embedding:%s does not exist, ignoring", name)
        else:
            if vectors.dim() not in (1, 2):
                raise TokenizeError(f"embedding {name!r} has shape {tuple(vectors.shape)}; encoder "
                                    f"{key} needs [n, {width}] vectors")
            # A vector of another width (an SD1 embedding in an SDXL prompt, for bigG) stays in
            # the tokens, as in ComfyUI; the encoder drops it with a warning (chunks_to_ids).
            rows = [vectors] if vectors.dim() == 1 else [vectors[i] for i in range(vectors.shape[0])]
            groups.append([(row, weight) for row in rows])
        if leftover == "":
            return groups
        piece = leftover
    groups.append([(t, weight) for t in encode(piece)])
    return groups


class FamilyTokenizer:
    """The tokenizers of one encoder set: `tokenize_with_weights(text)` -> {key: chunks}.

    Exposes each encoder's `SDTokenizer` as an attribute named by its slot (`clip_l`, `clip_g`,
    `clip_h`), as ComfyUI's SD1Tokenizer/SDXLTokenizer do (packs reach in there). Built for a
    family's encoder set, it is an instance of ComfyUI's class for it (the set's `tokenizer_class`:
    `SD1Tokenizer`, `SD2Tokenizer`, `SDXLTokenizer`, in the family packages' `clip.py`), as packs
    check.
    """

    def __init__(self, tokenizers: dict[str, SDTokenizer]) -> None:
        self.slots = tuple(tokenizers)
        for slot, tokenizer in tokenizers.items():
            setattr(self, slot, tokenizer)

    @property
    def clip_tokenizer(self) -> ClipTokenizer:
        return getattr(self, self.slots[0]).clip_tokenizer

    def by_slot(self) -> dict[str, SDTokenizer]:
        return {slot: getattr(self, slot) for slot in self.slots}

    def with_embedding_lookup(self, lookup: EmbeddingLookup | None) -> "FamilyTokenizer":
        """These tokenizers resolving `embedding:NAME` with `lookup`: one object per lookup (built on
        first use, then the same), so CLIP clones sharing a lookup share their tokenizer, as
        ComfyUI's clones share theirs, and a pack's patch on it (smZNodes replaces
        `tokenize_with_weights` on the per-encoder tokenizers) holds for every later read."""
        views = self.__dict__.setdefault("_lookup_views", {})
        key = id(lookup)
        entry = views.get(key)
        if entry is None or entry[0] is not lookup:
            view = type(self)({slot: t.with_embedding_lookup(lookup) for slot, t in self.by_slot().items()})
            entry = views[key] = (lookup, view)  # the lookup is held, so its id is not reused
        return entry[1]

    def state_dict(self) -> dict:
        """ComfyUI's tokenizer `state_dict`: CLIP tokenizers save nothing."""
        return {}

    def tokenize_with_weights(self, text: str, return_word_ids: bool = False, **kwargs: Any) -> dict[str, list]:
        return {t.spec.key: t.tokenize_with_weights(text, return_word_ids, **kwargs)
                for t in self.by_slot().values()}

    def untokenize(self, token_weight_pair: list[tuple]) -> list[tuple]:
        return getattr(self, self.slots[0]).untokenize(token_weight_pair)
