"""The Llama 3 byte-level BPE tokenizer (128,000 regular tokens, tiktoken style) with ComfyUI's
`tokenize_with_weights` behaviour for HiDream's Llama 3.1 8B encoder (`hidream.py`:
`LLAMA3Tokenizer(min_length=128, pad_token=128009)`).

Vocabulary: Meta's `tokenizer.model` (tiktoken format: one "base64(token bytes) rank" line per
token, ranks 0..127999), read from the installed `llama-models` package (PyPI, Meta's; see
`data/PROVENANCE.md`: it is under the Llama 3 Community License, so it is not copied into this
repository) or from a path given explicitly; its sha256 is checked. BPE after tiktoken (OpenAI):
text split by Llama 3's pre-tokenizer expression (contractions, letter runs with one leading
non-letter, runs of up to 3 digits, punctuation runs, newlines, spaces), each piece's bytes
merged by rank: repeatedly the adjacent pair whose concatenation has the lowest rank. The
`tokenizers` library runs it, with merges derived from the ranks (every split of a token into two
tokens, ordered by the merged token's rank: the order in which tiktoken would merge), bytes in
GPT-2's byte-to-unicode alphabet. No normalisation (tiktoken and Llama 3's tokenizer.json have none).

Added tokens are ComfyUI's (`comfy/text_encoders/llama_tokenizer/tokenizer_config.json`, the
llava-llama-3 tokenizer HunyuanVideo and HiDream load): `<|begin_of_text|>` 128000,
`<|end_of_text|>` 128001, `<|start_header_id|>` 128006, `<|end_header_id|>` 128007, `<|eot_id|>`
128009, `<|reserved_special_token_N|>` on the other ids up to 128255 (N counting 0.. over them),
then `<unk>` 128256, `<image>` 128257, `<pad>` 128258; all special, matched in the raw text.

`LlamaTokenizer` is ComfyUI's `SDTokenizer` as `LLAMA3Tokenizer` configures it: a start token
(128000) and no end token, one chunk for any prompt length, padded to `min_length` (HiDream 128)
with `pad_token` (HiDream 128009), no padding to a maximum, embedding key "llama" 4096 wide,
prompt weights `(word:1.2)` parsed, `embedding:NAME` looked up when an embedding lookup is set.
"""
from __future__ import annotations

import base64
import hashlib
import importlib.util
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from comfy_core.text_encoders.errors import VocabularyError
from comfy_core.text_encoders.qwen_tokenizer import NO_CHUNKING, EmbeddingLookup, QwenTokenizer
from comfy_core.text_encoders.vocab import bytes_to_unicode

if TYPE_CHECKING:
    from tokenizers import Tokenizer

REGULAR_TOKENS = 128_000
TOKENIZER_MODEL_SHA256 = "82e9d31979e92ab929cd544440f129d9ecd797b69e327f80f17e1c50d5551b55"
PACKAGE = "llama_models"  # PyPI `llama-models` (Meta); tested with 0.3.0
PACKAGE_FILE = ("llama3", "tokenizer.model")
BEGIN_OF_TEXT_ID = 128_000
END_OF_TEXT_ID = 128_001
EOT_ID = 128_009
HIDREAM_PAD_ID = EOT_ID
HIDREAM_MIN_LENGTH = 128

# Llama 3's pre-tokenizer pattern (Meta's `pat_str`; cl100k's with runs of up to three digits).
PRETOKENIZE_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                       r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

_NAMED = {128_000: "<|begin_of_text|>", 128_001: "<|end_of_text|>", 128_006: "<|start_header_id|>",
          128_007: "<|end_header_id|>", 128_009: "<|eot_id|>"}
_EXTRA = ((128_256, "<unk>"), (128_257, "<image>"), (128_258, "<pad>"))


def added_tokens() -> list[tuple[int, str]]:
    """(id, content) of ComfyUI's added tokens in id order (see the module doc)."""
    out, reserved = [], 0
    for index in range(REGULAR_TOKENS, REGULAR_TOKENS + 256):
        if index in _NAMED:
            out.append((index, _NAMED[index]))
        else:
            out.append((index, f"<|reserved_special_token_{reserved}|>"))
            reserved += 1
    return out + list(_EXTRA)


def default_model_path() -> Path:
    """Meta's `tokenizer.model` inside the installed `llama-models` package (found without
    importing it); a `VocabularyError` saying how to get it when the package is not installed."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise VocabularyError("the Llama 3 tokenizer needs Meta's tokenizer.model: install the `llama-models` "
                              "package (pip install --no-deps llama-models==0.3.0; Llama 3 Community License) "
                              "or pass the file's path")
    return Path(list(spec.submodule_search_locations)[0]).joinpath(*PACKAGE_FILE)


def load_llama_ranks(path: str | Path | None = None, check_hash: bool = True) -> dict[bytes, int]:
    """token bytes -> rank from a tiktoken model file (default: `default_model_path()`), its
    sha256 checked against Meta's Llama 3 file unless `check_hash` is off."""
    path = Path(path) if path is not None else default_model_path()
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise VocabularyError(f"Llama 3 tokenizer model {path} cannot be read: {exc}") from None
    if check_hash and hashlib.sha256(raw).hexdigest() != TOKENIZER_MODEL_SHA256:
        raise VocabularyError(f"Llama 3 tokenizer model {path}: sha256 {hashlib.sha256(raw).hexdigest()} is not "
                              f"Meta's Llama 3 tokenizer.model ({TOKENIZER_MODEL_SHA256})")
    ranks: dict[bytes, int] = {}
    for number, line in enumerate(raw.decode("ascii", errors="strict").splitlines(), start=1):
        if not line:
            continue
        try:
            token, rank = line.split(" ")
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except ValueError:
            raise VocabularyError(f"Llama 3 tokenizer model {path} line {number}: expected 'base64 rank', "
                                  f"got {line[:40]!r}") from None
    if len(ranks) != REGULAR_TOKENS or sorted(ranks.values()) != list(range(REGULAR_TOKENS)):
        raise VocabularyError(f"Llama 3 tokenizer model {path}: {len(ranks)} tokens, expected ranks "
                              f"0..{REGULAR_TOKENS - 1}")
    return ranks


def merges_from_ranks(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """The BPE merges equivalent to rank-ordered merging: every split (a, b) of a multi-byte
    token into two tokens, ordered by the token's rank, then the parts' ranks."""
    merges = []
    for token, rank in ranks.items():
        if len(token) < 2:
            continue
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in ranks and right in ranks:
                merges.append((rank, ranks[left], ranks[right], left, right))
    merges.sort()
    return [(left, right) for _, _, _, left, right in merges]


def byte_level_bpe(vocab: dict[str, int], merges: list[tuple[str, str]]) -> Any:
    """A `tokenizers` byte-level BPE (tiktoken-style: merges ignored for whole-word vocabulary
    hits) with Llama 3's pre-tokenizer split and the byte-level decoder; no special tokens yet."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False,
                                     ignore_merges=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def build_llama_tokenizer(path: str | Path | None = None) -> "Tokenizer":
    """A `tokenizers.Tokenizer` for Llama 3 from the tiktoken model file (default: the package's)."""
    from tokenizers import AddedToken

    ranks = load_llama_ranks(path)
    alphabet = bytes_to_unicode()

    def text(token: bytes) -> str:
        return "".join(alphabet[b] for b in token)

    vocab = {text(token): rank for token, rank in ranks.items()}
    merges = [(text(a), text(b)) for a, b in merges_from_ranks(ranks)]
    tokenizer = byte_level_bpe(vocab, merges)
    for index, content in added_tokens():
        tokenizer.add_special_tokens([AddedToken(content, single_word=False, lstrip=False, rstrip=False,
                                                 normalized=False, special=True)])
        if tokenizer.token_to_id(content) != index:
            raise VocabularyError(f"Llama 3 added token {content} got id {tokenizer.token_to_id(content)}, "
                                  f"expected {index}")
    return tokenizer


@cache
def shared_llama_tokenizer() -> "Tokenizer":
    """One tokenizer over the package's vocabulary for the process (immutable; ~1 s to build)."""
    return build_llama_tokenizer()


class LlamaTokenizer(QwenTokenizer):
    """ComfyUI's `LLAMA3Tokenizer` (see the module doc): the Qwen tokenizer's weights, embeddings
    and chunking with a start token in front of the chunk."""

    def __init__(self, embedding_key: str = "llama", embedding_width: int = 4096,
                 min_length: int | None = HIDREAM_MIN_LENGTH, min_padding: int | None = None,
                 max_length: int = NO_CHUNKING, pad_token: int = HIDREAM_PAD_ID,
                 embedding_lookup: EmbeddingLookup | None = None, disable_weights: bool = False,
                 backend: "Tokenizer | None" = None) -> None:
        super().__init__(embedding_key, embedding_width, min_length, min_padding, max_length, pad_token,
                         embedding_lookup, disable_weights,
                         backend if backend is not None else shared_llama_tokenizer())
        self.start_token = BEGIN_OF_TEXT_ID
        self.tokens_start = 1

    def encode(self, text: str) -> list[int]:
        """The ids of `text` without the start token (ComfyUI drops it from each piece)."""
        return list(self.backend.encode(text, add_special_tokens=False).ids)

    def _pack(self, groups: list[list[tuple[Any, float]]], min_length: int | None,
              min_padding: int | None) -> list[list[tuple]]:
        """ComfyUI's batching with a start token and no end token: the start token opens the
        chunk (word id 0), then the groups, then the padding to `min_length`."""
        chunks = super()._pack(groups, None, None)
        chunks = [[(self.start_token, 1.0, 0)] + chunk for chunk in chunks]
        last = chunks[-1]
        if min_padding is not None:
            last.extend([(self.pad_token, 1.0, 0)] * int(min_padding))
        if min_length is not None and len(last) < min_length:
            last.extend([(self.pad_token, 1.0, 0)] * (int(min_length) - len(last)))
        return chunks


__all__ = ["BEGIN_OF_TEXT_ID", "EOT_ID", "HIDREAM_MIN_LENGTH", "HIDREAM_PAD_ID", "LlamaTokenizer", "added_tokens",
           "build_llama_tokenizer", "default_model_path", "load_llama_ranks", "merges_from_ranks",
           "shared_llama_tokenizer"]
