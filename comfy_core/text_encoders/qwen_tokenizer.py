"""The Qwen byte-level BPE tokenizer (Qwen2 / Qwen2.5 / Qwen3 share one vocabulary) with ComfyUI's
`tokenize_with_weights` behaviour for its Qwen text encoders (Z-Image's `qwen3_4b`, ...).

Vocabulary: `data/qwen2_merges.txt.gz`, Qwen's 151,387 BPE merges (see `data/PROVENANCE.md`,
derived by `scripts/derive_qwen_vocab.py`). Byte-level BPE after GPT-2 (Radford et al. 2019,
"Language Models are Unsupervised Multitask Learners"): the 151,643 regular tokens are the 256
byte symbols in GPT-2's byte-to-unicode order, then one token per merge (the merged pair), in merge
order; this gives exactly Qwen's `vocab.json` (checked equal to the one ComfyUI ships in
`comfy/text_encoders/qwen25_tokenizer/`). Text is NFC-normalised, split by Qwen's pre-tokenizer
regular expression (contractions, letter runs with one leading non-letter, single digits,
punctuation runs, newlines, spaces), each piece byte-encoded and merged by rank. The added tokens
(`ADDED_TOKENS`, ids 151643..151668) are ComfyUI's `qwen25_tokenizer/tokenizer_config.json`'s:
Qwen2's 22 (`<|endoftext|>`, `<|im_start|>`, `<|im_end|>`, vision, tool-call and fill-in-the-middle
markers) and OmniGen2's `<|img|>`, `<|endofimg|>`, `<|meta|>`, `<|endofmeta|>` at 151665..151668
(Qwen3's own `<tool_response>` / `<think>` there are not added tokens in ComfyUI, so `<think>` is
tokenized as text, as it is there). Added tokens are matched in the raw text before the BPE,
special or not. The `tokenizers` library runs it.

`QwenTokenizer` is ComfyUI's `SDTokenizer` as its Qwen encoders configure it (`z_image.py:
Qwen3Tokenizer`, `qwen_image.py: Qwen25_7BVLITokenizer`): no start and no end token, pad
`<|endoftext|>` (151643), one chunk for any prompt length (max_length 99999999), no padding to the
maximum, `min_length` 1 (an empty prompt is one pad token); prompt weights `(word:1.2)` parsed
unless `disable_weights` (Z-Image's tokenizer disables them: the parentheses stay text, escapes
`\\(` become `(`), `embedding:NAME` looked up when an embedding lookup is set.
`tokenizer_options` `{key}_min_length` / `{key}_min_padding` override the padding, as for T5.
"""
from __future__ import annotations

import gzip
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
from comfy_core.text_encoders.vocab import bytes_to_unicode

if TYPE_CHECKING:
    from tokenizers import Tokenizer

DATA_DIR = Path(__file__).with_name("data")
DEFAULT_MERGES = DATA_DIR / "qwen2_merges.txt.gz"

NUM_MERGES = 151_387
REGULAR_TOKENS = 256 + NUM_MERGES  # 151,643
ENDOFTEXT_ID = 151_643
IM_START_ID = 151_644
IM_END_ID = 151_645
PAD_ID = ENDOFTEXT_ID  # ComfyUI's Qwen tokenizers pad with <|endoftext|>
NO_CHUNKING = 99_999_999  # ComfyUI's max_length for its LLM tokenizers: one chunk

# (id, content, special) in id order: ComfyUI's qwen25_tokenizer added tokens (see module doc).
ADDED_TOKENS: tuple[tuple[int, str, bool], ...] = tuple(
    (ENDOFTEXT_ID + offset, content, special) for offset, (content, special) in enumerate((
        ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
        ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
        ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
        ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
        ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False), ("</tool_call>", False),
        ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False),
        ("<|fim_pad|>", False), ("<|repo_name|>", False), ("<|file_sep|>", False),
        ("<|img|>", True), ("<|endofimg|>", True), ("<|meta|>", True), ("<|endofmeta|>", True),
    )))

# Qwen2's pre-tokenizer pattern (the `Split` of its tokenizer.json; tiktoken's cl100k style with
# single digits): case-insensitive contractions; letters with at most one leading non-letter,
# non-digit, non-newline; one digit; a space and a run of punctuation with its newlines; newline
# runs with their leading spaces; spaces not followed by a non-space; other spaces.
PRETOKENIZE_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                       r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# lookup(name, embedding_key, width) -> tensor [n, width] or [width], or None (sd_tokenizer.EmbeddingLookup)
EmbeddingLookup = Callable[[str, str, int], Any]


def load_qwen_merges(path: str | Path | None = None) -> list[tuple[str, str]]:
    """The ordered merge rules from the (gzipped) merges file: lines "a b", an optional
    `#version` header line (Qwen's own merges.txt has one) skipped."""
    path = Path(path) if path is not None else DEFAULT_MERGES
    try:
        raw = path.read_bytes()
        text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError, gzip.BadGzipFile) as exc:
        raise VocabularyError(f"Qwen merges {path} cannot be read: {exc}") from None
    lines = text.split("\n")
    if lines and lines[0].startswith("#version"):
        lines = lines[1:]
    if lines and lines[-1] == "":
        lines = lines[:-1]
    if len(lines) != NUM_MERGES:
        raise VocabularyError(f"Qwen merges {path}: {len(lines)} merge lines, expected {NUM_MERGES}")
    merges: list[tuple[str, str]] = []
    for number, line in enumerate(lines, start=1):
        parts = line.split(" ")
        if len(parts) != 2 or not parts[0] or not parts[1]:
            raise VocabularyError(f"Qwen merges {path} line {number}: expected 'a b', got {line!r}")
        merges.append((parts[0], parts[1]))
    return merges


def qwen_vocabulary(merges: list[tuple[str, str]]) -> dict[str, int]:
    """token -> id of the regular tokens: the 256 byte symbols, then one token per merge."""
    tokens = list(bytes_to_unicode().values()) + [a + b for a, b in merges]
    vocab = {token: index for index, token in enumerate(tokens)}
    if len(vocab) != REGULAR_TOKENS:
        raise VocabularyError(f"Qwen vocabulary has {len(vocab)} distinct tokens, expected {REGULAR_TOKENS}")
    return vocab


def build_qwen_tokenizer(path: str | Path | None = None) -> "Tokenizer":
    """A `tokenizers.Tokenizer` for Qwen from the merges file (default: the shipped one)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    merges = load_qwen_merges(path)
    tokenizer = Tokenizer(models.BPE(vocab=qwen_vocabulary(merges), merges=merges, fuse_unk=False,
                                     byte_fallback=False))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    for index, content, special in ADDED_TOKENS:
        token = AddedToken(content, single_word=False, lstrip=False, rstrip=False, normalized=False,
                           special=special)
        (tokenizer.add_special_tokens if special else tokenizer.add_tokens)([token])
        if tokenizer.token_to_id(content) != index:
            raise VocabularyError(f"Qwen added token {content} got id {tokenizer.token_to_id(content)}, "
                                  f"expected {index}")
    return tokenizer


@cache
def shared_qwen_tokenizer() -> "Tokenizer":
    """One tokenizer over the shipped vocabulary for the process (immutable; ~0.5 s to build)."""
    return build_qwen_tokenizer()


class QwenTokenizer:
    """ComfyUI's `SDTokenizer` with its Qwen settings (see the module doc): a slot of a
    `FamilyTokenizer` (token key = `embedding_key`), with `SDTokenizer`'s surface.

    `embedding_key` / `embedding_width`: ComfyUI's per encoder (`qwen3_4b`, 2560 for Z-Image);
    `disable_weights`: the tokenizer's default for ComfyUI's `disable_weights` switch.
    """

    def __init__(self, embedding_key: str, embedding_width: int, min_length: int | None = 1,
                 min_padding: int | None = None, max_length: int = NO_CHUNKING, pad_token: int = PAD_ID,
                 embedding_lookup: EmbeddingLookup | None = None, disable_weights: bool = False,
                 backend: "Tokenizer | None" = None) -> None:
        self.backend = backend if backend is not None else shared_qwen_tokenizer()
        self.embedding_lookup = embedding_lookup
        self.spec = TokenizerSpec(key=embedding_key, pad_token=pad_token, embedding_width=embedding_width,
                                  embedding_key=embedding_key, max_length=max_length, min_length=min_length)
        # ComfyUI's SDTokenizer attributes, which packs read from the instance.
        self.start_token = None
        self.end_token = None
        self.pad_token = pad_token
        self.tokens_start = 0
        self.tokenizer_adds_end_token = False
        self.pad_with_end = False
        self.pad_to_max_length = False
        self.pad_left = False
        self.max_length = max_length
        self.min_length = min_length
        self.min_padding = min_padding
        self.max_word_length = MAX_WORD_LENGTH
        self.embedding_identifier = EMBEDDING_IDENTIFIER
        self.embedding_size = embedding_width
        self.embedding_key = embedding_key
        self.disable_weights = disable_weights
        folders = getattr(embedding_lookup, "folders", None)
        self.embedding_directory = None if folders is None else [str(f) for f in folders]

    @property
    def tokenizer(self) -> "Tokenizer":
        """The `tokenizers.Tokenizer` (ComfyUI's is transformers' Qwen2Tokenizer over the same data)."""
        return self.backend

    @property
    def inv_vocab(self) -> dict[int, str]:
        return _inverse_vocab(self.backend)

    def with_embedding_lookup(self, lookup: EmbeddingLookup | None) -> "QwenTokenizer":
        """This tokenizer resolving `embedding:NAME` with `lookup`: self when the lookup is the same."""
        if lookup is self.embedding_lookup:
            return self
        return type(self)(self.embedding_key, self.embedding_size, self.min_length, self.min_padding,
                          self.max_length, self.pad_token, lookup, self.disable_weights, self.backend)

    def state_dict(self) -> dict:
        """ComfyUI's `SDTokenizer.state_dict`: nothing to save (the vocabulary ships with us)."""
        return {}

    def encode(self, text: str) -> list[int]:
        """The ids of `text` (Qwen adds no start or end token)."""
        return list(self.backend.encode(text, add_special_tokens=False).ids)

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        """ComfyUI's `SDTokenizer.decode`."""
        return self.backend.decode([int(t) for t in token_ids], skip_special_tokens=skip_special_tokens)

    def tokenize_with_weights(self, text: str, return_word_ids: bool = False, **kwargs: Any) -> list[list[tuple]]:
        """One chunk (for any prompt length) of `(token, weight)` pairs, or `(token, weight,
        word_id)` with `return_word_ids`: the prompt's tokens, then padding to `min_length`."""
        options = kwargs.get("tokenizer_options") or {}
        min_length = options.get(f"{self.embedding_key}_min_length", self.min_length)
        min_padding = options.get(f"{self.embedding_key}_min_padding", self.min_padding)
        min_length = kwargs.get("min_length", min_length)
        escaped = escape_important(text)
        if kwargs.get("disable_weights", self.disable_weights):
            segments = [(escaped, 1.0)]
        else:
            segments = parse_weights(escaped)
        groups: list[list[tuple[Any, float]]] = []
        for segment, weight in segments:
            for piece in _split_embeddings(unescape_important(segment)):
                groups.extend(embedding_piece_groups(piece, weight, self.embedding_lookup is not None,
                                                     self._find_embedding, self.encode, self.embedding_key,
                                                     self.embedding_size))
        chunks = self._pack(groups, min_length, min_padding)
        if not return_word_ids:
            return [[(t, w) for t, w, _ in chunk] for chunk in chunks]
        return chunks

    def untokenize(self, token_weight_pair: list[tuple]) -> list[tuple]:
        inverse = self.inv_vocab
        return [(pair, inverse[pair[0]]) for pair in token_weight_pair]

    def _find_embedding(self, name: str) -> tuple[Any, str]:
        return find_embedding(self.embedding_lookup, name, self.embedding_key, self.embedding_size)

    def _pack(self, groups: list[list[tuple[Any, float]]], min_length: int | None,
              min_padding: int | None) -> list[list[tuple]]:
        """ComfyUI's batching without start or end tokens: groups fill chunks of `max_length`;
        a group of 8+ tokens is split at the boundary, a shorter one moves whole to the next
        chunk (with the default maximum, everything is one chunk); then the padding."""
        chunk: list[tuple] = []
        chunks: list[list[tuple]] = [chunk]
        for word_id, group in enumerate(groups, start=1):
            is_large = len(group) >= self.max_word_length
            remaining = group
            while remaining:
                if len(remaining) + len(chunk) > self.max_length:
                    if is_large:
                        room = self.max_length - len(chunk)
                        chunk.extend((t, w, word_id) for t, w in remaining[:room])
                        remaining = remaining[room:]
                    chunk = []
                    chunks.append(chunk)
                else:
                    chunk.extend((t, w, word_id) for t, w in remaining)
                    remaining = []
        if min_padding is not None:
            chunk.extend([(self.pad_token, 1.0, 0)] * int(min_padding))
        if min_length is not None and len(chunk) < min_length:
            chunk.extend([(self.pad_token, 1.0, 0)] * (int(min_length) - len(chunk)))
        return chunks


@cache
def _inverse_vocab(backend: "Tokenizer") -> dict[int, str]:
    """id -> token (ComfyUI's `inv_vocab`); one per tokenizer object, shared: do not modify."""
    return {index: token for token, index in backend.get_vocab(with_added_tokens=True).items()}
