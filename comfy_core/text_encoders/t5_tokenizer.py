"""The T5 tokenizer (SentencePiece unigram, Google's 32k T5 vocabulary) with ComfyUI's
`tokenize_with_weights` behaviour for the `t5xxl` encoder of SD3 and Flux.

Vocabulary: `data/t5_tokenizer.json.gz` (see `data/PROVENANCE.md`), loaded with the `tokenizers`
library. The file is the older serialisation of the same tokenizer; its text pipeline is set here
to the one in ComfyUI's `comfy/text_encoders/t5_tokenizer/tokenizer.json` (written by a newer
converter): the precompiled SentencePiece normaliser, then trailing whitespace stripped, runs of
2+ spaces turned into one `▁`, Metaspace pre-tokenisation with the `▁` prefix on the first
section only. Ids were checked equal to ComfyUI's file on unicode, digits, punctuation, special
tokens, repeated and trailing spaces and long text (tests hard-code some).

Chunking and padding re-implemented from ComfyUI's `comfy/sd1_clip.py: SDTokenizer` as
`comfy/text_encoders/sd3_clip.py: T5XXLTokenizer` (and `flux.py`) configure it: no start token,
end token `</s>` (1), pad token `<pad>` (0), one chunk holding every token (max_length 99999999),
no padding to max_length; then `min_padding` pad tokens, then padding up to `min_length` (SD3 77,
Flux 256). `tokenizer_options` (`CLIP.set_tokenizer_option`, ComfyUI's T5TokenizerOptions node)
override them as `t5xxl_min_length` / `t5xxl_min_padding`. Prompt weights `(word:1.2)` and escapes
are parsed as for CLIP (`prompt_weights.py`); each weighted piece is tokenized on its own.
"""
from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from comfy_core.text_encoders.errors import VocabularyError
from comfy_core.text_encoders.prompt_weights import escape_important, parse_weights, unescape_important
from comfy_core.text_encoders.sd_tokenizer import (
    EMBEDDING_IDENTIFIER,
    MAX_WORD_LENGTH,
    TokenizerSpec,
    _split_embeddings,
    embedding_piece_groups,
    find_embedding,
)

if TYPE_CHECKING:
    from tokenizers import Tokenizer


DATA_DIR = Path(__file__).with_name("data")
DEFAULT_VOCABULARY = DATA_DIR / "t5_tokenizer.json.gz"

PAD_ID = 0  # <pad>
EOS_ID = 1  # </s>
UNK_ID = 2  # <unk>
# ComfyUI's T5XXLTokenizer: one chunk for any prompt length.
NO_CHUNKING = 99999999
T5XXL_EMBEDDING_WIDTH = 4096

# ComfyUI's tokenizer.json pipeline around the precompiled SentencePiece normaliser (see module doc).
_NORMALIZER_TAIL = [
    {"type": "Strip", "strip_left": False, "strip_right": True},
    {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": "\u2581"},
]
_PRE_TOKENIZER = {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True, "prepend_scheme": "first"}
_DECODER = {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True, "prepend_scheme": "always"}

# lookup(name, embedding_key, width) -> tensor [n, width] or [width], or None (sd_tokenizer.EmbeddingLookup)
EmbeddingLookup = Callable[[str, str, int], Any]


def load_t5_tokenizer(path: str | Path | None = None) -> "Tokenizer":
    """A `tokenizers.Tokenizer` for T5 from a (gzipped) HF tokenizer.json, with ComfyUI's pipeline."""
    from tokenizers import Tokenizer

    path = Path(path) if path is not None else DEFAULT_VOCABULARY
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise VocabularyError(f"T5 vocabulary {path} cannot be read: {exc}") from None
    try:
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        spec = json.loads(raw)
        model = spec["model"]
        if model.get("type") != "Unigram" or len(model.get("vocab", ())) < 3:
            raise VocabularyError(f"T5 vocabulary {path}: expected a SentencePiece unigram model, "
                                  f"got {model.get('type')!r}")
        normalizers = (spec.get("normalizer") or {}).get("normalizers", [])
        precompiled = [n for n in normalizers if n.get("type") == "Precompiled"]
        if len(precompiled) != 1:
            raise VocabularyError(f"T5 vocabulary {path}: no precompiled SentencePiece normaliser")
    except (ValueError, KeyError, TypeError, OSError) as exc:
        raise VocabularyError(f"T5 vocabulary {path} is not a tokenizer.json: {exc}") from None
    spec["normalizer"] = {"type": "Sequence", "normalizers": precompiled + _NORMALIZER_TAIL}
    spec["pre_tokenizer"] = dict(_PRE_TOKENIZER)
    spec["decoder"] = dict(_DECODER)
    spec["truncation"] = None
    spec["padding"] = None
    tokenizer = Tokenizer.from_str(json.dumps(spec))
    for token, expected in (("<pad>", PAD_ID), ("</s>", EOS_ID), ("<unk>", UNK_ID)):
        if tokenizer.token_to_id(token) != expected:
            raise VocabularyError(f"T5 vocabulary {path}: {token} has id {tokenizer.token_to_id(token)}, "
                                  f"expected {expected}")
    return tokenizer


@cache
def shared_t5_tokenizer() -> "Tokenizer":
    """One tokenizer over the shipped vocabulary for the process (immutable; ~0.3 s to build)."""
    return load_t5_tokenizer()


class T5XXLTokenizer:
    """ComfyUI's `T5XXLTokenizer` (an `SDTokenizer` with T5's settings): a slot of our
    `FamilyTokenizer` (attribute `t5xxl`, token key "t5xxl"), with `SDTokenizer`'s surface.

    `min_length`: 77 for SD3, 256 for Flux (ComfyUI's defaults for those families).
    """

    def __init__(self, min_length: int | None = 77, min_padding: int | None = None,
                 max_length: int = NO_CHUNKING, embedding_lookup: EmbeddingLookup | None = None,
                 embedding_width: int = T5XXL_EMBEDDING_WIDTH, embedding_key: str = "t5xxl",
                 backend: "Tokenizer | None" = None) -> None:
        self.backend = backend if backend is not None else shared_t5_tokenizer()
        self.embedding_lookup = embedding_lookup
        # What FamilyTokenizer reads of a slot's tokenizer (`spec.key`: the token-dict key).
        self.spec = TokenizerSpec(key=embedding_key, pad_token=PAD_ID, embedding_width=embedding_width,
                                  embedding_key=embedding_key, max_length=max_length, min_length=min_length)
        # ComfyUI's SDTokenizer attributes, which packs read from the instance.
        self.start_token = None
        self.end_token = EOS_ID
        self.pad_token = PAD_ID
        self.tokens_start = 0
        self.tokenizer_adds_end_token = True
        self.pad_with_end = False
        self.pad_to_max_length = False
        self.max_length = max_length
        self.min_length = min_length
        self.min_padding = min_padding
        self.max_word_length = MAX_WORD_LENGTH
        self.embedding_identifier = EMBEDDING_IDENTIFIER
        self.embedding_size = embedding_width
        self.embedding_key = embedding_key
        self.embedding_directory = _embedding_directory(embedding_lookup)

    @property
    def tokenizer(self) -> "Tokenizer":
        """The `tokenizers.Tokenizer` (ComfyUI's `SDTokenizer.tokenizer` is transformers'
        T5TokenizerFast over the same data; ours is the library object it wraps)."""
        return self.backend

    @property
    def inv_vocab(self) -> dict[int, str]:
        return _inverse_vocab(self.backend)

    def with_embedding_lookup(self, lookup: EmbeddingLookup | None) -> "T5XXLTokenizer":
        """This tokenizer resolving `embedding:NAME` with `lookup` (`t5xxl` vectors of the
        encoder's width, as ComfyUI's T5 tokenizer looks them up): self when the lookup is the same."""
        if lookup is self.embedding_lookup:
            return self
        return T5XXLTokenizer(self.min_length, self.min_padding, self.max_length, lookup,
                              self.embedding_size, self.embedding_key, self.backend)

    def state_dict(self) -> dict:
        """ComfyUI's `SDTokenizer.state_dict`: nothing to save."""
        return {}

    def encode(self, text: str) -> list[int]:
        """The ids of `text`, without `</s>` (ComfyUI's `tokenizer(word)["input_ids"][:-1]`)."""
        return list(self.backend.encode(text, add_special_tokens=False).ids)

    def tokenize_with_weights(self, text: str, return_word_ids: bool = False, **kwargs: Any) -> list[list[tuple]]:
        """One chunk (normally) of `(token, weight)` pairs, or `(token, weight, word_id)` with
        `return_word_ids`: the prompt's tokens, `</s>`, then the padding (see module doc)."""
        options = kwargs.get("tokenizer_options") or {}
        min_length = options.get(f"{self.embedding_key}_min_length", self.min_length)
        min_padding = options.get(f"{self.embedding_key}_min_padding", self.min_padding)
        escaped = escape_important(text)
        segments = [(escaped, 1.0)] if kwargs.get("disable_weights", False) else parse_weights(escaped)
        groups: list[list[tuple[Any, float]]] = []
        for segment, weight in segments:
            for piece in _split_embeddings(unescape_important(segment)):
                groups.extend(self._piece_groups(piece, weight))
        chunks = self._pack(groups, min_length, min_padding)
        if not return_word_ids:
            return [[(t, w) for t, w, _ in chunk] for chunk in chunks]
        return chunks

    def untokenize(self, token_weight_pair: list[tuple]) -> list[tuple]:
        inverse = self.inv_vocab
        return [(pair, inverse[pair[0]]) for pair in token_weight_pair]

    def _piece_groups(self, piece: str, weight: float) -> list[list[tuple[Any, float]]]:
        return embedding_piece_groups(piece, weight, self.embedding_lookup is not None, self._find_embedding,
                                      self.encode, self.embedding_key, self.embedding_size)

    def _find_embedding(self, name: str) -> tuple[Any, str]:
        return find_embedding(self.embedding_lookup, name, self.embedding_key, self.embedding_size)

    def _pack(self, groups: list[list[tuple[Any, float]]], min_length: int | None,
              min_padding: int | None) -> list[list[tuple]]:
        """ComfyUI's batching with no start token and no padding to max_length: groups fill a
        chunk of `max_length` (room kept for `</s>`); a group of 8+ tokens is split at the
        boundary, a shorter one moves whole to the next chunk."""
        limit = self.max_length - 1  # room for </s>
        chunk: list[tuple] = []
        chunks: list[list[tuple]] = [chunk]
        for word_id, group in enumerate(groups, start=1):
            is_large = len(group) >= self.max_word_length
            remaining = group
            while remaining:
                if len(remaining) + len(chunk) > limit:
                    room = limit - len(chunk)
                    if is_large:
                        chunk.extend((t, w, word_id) for t, w in remaining[:room])
                        remaining = remaining[room:]
                    chunk.append((self.end_token, 1.0, 0))
                    chunk = []
                    chunks.append(chunk)
                else:
                    chunk.extend((t, w, word_id) for t, w in remaining)
                    remaining = []
        chunk.append((self.end_token, 1.0, 0))
        if min_padding is not None:
            chunk.extend([(self.pad_token, 1.0, 0)] * int(min_padding))
        if min_length is not None and len(chunk) < min_length:
            chunk.extend([(self.pad_token, 1.0, 0)] * (int(min_length) - len(chunk)))
        return chunks


@cache
def _inverse_vocab(backend: "Tokenizer") -> dict[int, str]:
    """id -> piece (ComfyUI's `inv_vocab`); one per tokenizer object, shared: do not modify."""
    return {index: token for token, index in backend.get_vocab(with_added_tokens=True).items()}


def _embedding_directory(lookup: EmbeddingLookup | None) -> list[str] | None:
    folders = getattr(lookup, "folders", None)
    return None if folders is None else [str(folder) for folder in folders]
