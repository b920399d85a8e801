"""ACE-Step 1's lyric tokenizer: lyrics -> the token ids the DiT's lyric encoder embeds, as ComfyUI
computes them (`comfy/text_encoders/ace.py`: `VoiceBpeTokenizer` inside `LyricsTokenizer`, an
`SDTokenizer`), written here from that behaviour.

Vocabulary: `data/ace_lyrics/vocab.json`, ACE-Step's lyric BPE (`acestep/models/lyrics_utils/
vocab.json`, Apache-2.0; provenance and licence in `data/PROVENANCE.md` and next to the file),
byte-identical to the `ace_lyrics_tokenizer/vocab.json` ComfyUI ships. A character-level BPE:
6,681 tokens (`[STOP]` 0, `[UNK]` 1, `[SPACE]` 2, characters, merged pieces), 8,532 merge rules
and 33 added tokens (the language tags `[en]` ... `[hi]`, `[START]` 261, and the song-structure
tags `[start]` ... `[break]` at 6681..6692).

Per weighted piece of the lyrics (ComfyUI's `SDTokenizer.tokenize_with_weights`: `(text:1.2)`
weights unless `disable_weights`, `\\(` escapes, cut before ` embedding:`), the piece is split at
newlines; each line, stripped:

- blank: token 2;
- else: a leading `[xx]` tag of a supported language (`LANGUAGES`, case-insensitive) sets the
  language and is removed, English otherwise; kana become romaji (`ace_text_cleaners.
  japanese_to_romaji`) and a line that changes is Japanese; a line starting with `[...]` (a
  structure tag) is cleaned as English; the line is cleaned (`clean_lyric_line`), prefixed with
  its tag (`[zh-cn]` for Chinese), its spaces written `[SPACE]`, and BPE-encoded; then token 2.

The BPE stage is the `tokenizers` library's over this file (what ComfyUI runs), re-done here:
added tokens are cut out first (leftmost, longest), the rest split into runs of word characters
(Unicode Alphabetic, marks, decimal digits, connector punctuation, joiners) and runs of other
non-space characters, each run merged by rank (a merge listed twice ranks at its last listing,
as that library builds its table), characters outside the vocabulary `[UNK]` one each.

The chunk is ComfyUI's: `[START]` (261), then every piece's tokens without its own leading 261,
one chunk of any length, padded with 2 to `min_length` 1 (`lyrics_min_length` /
`lyrics_min_padding` tokenizer options). An empty text is `[261]`, a single newline `[261, 2, 2]`.
Words `embedding:NAME` are tokenized as text (lyrics have no embeddings: ComfyUI would look one
up as a 1024-wide lyric vector that its encoder cannot take).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Mapping

import regex

from comfy_core.text_encoders.ace_text_cleaners import clean_lyric_line, japanese_to_romaji
from comfy_core.text_encoders.errors import VocabularyError
from comfy_core.text_encoders.prompt_weights import escape_important, parse_weights, unescape_important
from comfy_core.text_encoders.sd_tokenizer import _split_embeddings

DEFAULT_VOCABULARY = Path(__file__).with_name("data") / "ace_lyrics" / "vocab.json"
EMBEDDING_KEY = "lyrics"  # ComfyUI's embedding_key and the token dict's key
START_ID = 261  # `[START]`
LINE_END_ID = 2  # `[SPACE]`: closes every line; also ComfyUI's pad token here
UNK_TOKEN = "[UNK]"
SPACE_TOKEN = "[SPACE]"
# ComfyUI's SUPPORT_LANGUAGES: language -> the id of its tag token (checked against the file).
LANGUAGES: dict[str, int] = {
    "en": 259, "de": 260, "fr": 262, "es": 284, "it": 285, "pt": 286, "pl": 294, "tr": 295, "ru": 267,
    "cs": 293, "nl": 297, "ar": 5022, "zh": 5023, "ja": 5412, "hu": 5753, "ko": 6152, "hi": 6680}
WORD_CACHE_SIZE = 65_536  # merged words kept per tokenizer
_STRUCTURE = re.compile(r"\[.*?\]")  # matched at the line's start: the line is cleaned as English

# The `tokenizers` Whitespace pre-tokenizer's classes (`\w+|[^\w\s]+` in its regex engine).
_WORD = r"\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}"
_PRETOKEN = regex.compile(rf"[{_WORD}]+|[^{_WORD}\p{{White_Space}}]+")


def language_tag(lang: str) -> str:
    """The tag token a line of language `lang` starts with."""
    return "[zh-cn]" if lang == "zh" else f"[{lang}]"


@dataclass(frozen=True)
class LyricVocabulary:
    """The BPE tables of a `tokenizers` vocab.json: token -> id, merge pair -> rank, added tokens."""

    vocab: Mapping[str, int]
    merge_ranks: Mapping[tuple[str, str], int]
    added: Mapping[str, int]
    unk_id: int


def load_lyric_vocabulary(path: str | Path | None = None) -> LyricVocabulary:
    """Read and check ACE-Step's lyric vocab.json (default: the shipped one). Raises
    `VocabularyError` naming the file for anything this tokenizer does not reproduce."""
    path = Path(path) if path is not None else DEFAULT_VOCABULARY
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        model = data["model"]
        vocab = {str(k): int(v) for k, v in model["vocab"].items()}
        merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
        added = {str(t["content"]): int(t["id"]) for t in data["added_tokens"]}
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise VocabularyError(f"ACE-Step lyric vocabulary {path} cannot be read: {exc!r}") from None

    def fail(what: str) -> VocabularyError:
        return VocabularyError(f"ACE-Step lyric vocabulary {path}: {what}")

    expected = {"type": "BPE", "dropout": None, "unk_token": UNK_TOKEN, "continuing_subword_prefix": None,
                "end_of_word_suffix": None, "fuse_unk": False}
    for key, value in expected.items():
        if model.get(key) != value:
            raise fail(f"model.{key} is {model.get(key)!r}, expected {value!r}")
    if model.get("byte_fallback", False):
        raise fail("byte_fallback is set")
    if data.get("normalizer") is not None or data.get("pre_tokenizer") != {"type": "Whitespace"}:
        raise fail(f"expected no normalizer and a Whitespace pre-tokenizer, got {data.get('normalizer')!r} and "
                   f"{data.get('pre_tokenizer')!r}")
    ranks: dict[tuple[str, str], int] = {}
    for rank, pair in enumerate(merges):
        if len(pair) != 2 or pair[0] not in vocab or pair[1] not in vocab or pair[0] + pair[1] not in vocab:
            raise fail(f"merge {rank} {pair!r} is not two tokens whose join is a token")
        ranks[pair] = rank  # a repeated merge ranks at its last listing (the `tokenizers` table)
    wanted = {UNK_TOKEN: 1, SPACE_TOKEN: LINE_END_ID, "[START]": START_ID}
    wanted.update({language_tag(lang): index for lang, index in LANGUAGES.items()})
    for token, index in wanted.items():
        if added.get(token) != index:
            raise fail(f"added token {token} has id {added.get(token)}, expected {index}")
    return LyricVocabulary(vocab, ranks, added, added[UNK_TOKEN])


class LyricBpe:
    """The BPE stage (module doc): text with tags -> ids."""

    def __init__(self, vocabulary: LyricVocabulary) -> None:
        self.vocabulary = vocabulary
        # Longest first: at one position the alternation then takes the longest added token.
        tokens = sorted(vocabulary.added, key=len, reverse=True)
        self._added = re.compile("|".join(re.escape(t) for t in tokens))
        self._words: dict[str, tuple[int, ...]] = {}

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        position = 0
        for match in self._added.finditer(text):
            self._encode_plain(text[position:match.start()], ids)
            ids.append(self.vocabulary.added[match.group(0)])
            position = match.end()
        self._encode_plain(text[position:], ids)
        return ids

    def _encode_plain(self, text: str, ids: list[int]) -> None:
        for word in _PRETOKEN.findall(text):
            cached = self._words.get(word)
            if cached is None:
                if len(self._words) >= WORD_CACHE_SIZE:
                    self._words.clear()  # bounded: a long-running server sees unbounded text
                cached = self._words[word] = self._merge(word)
            ids.extend(cached)

    def _merge(self, word: str) -> tuple[int, ...]:
        """Rank-ordered BPE (Sennrich et al. 2016, "Neural Machine Translation of Rare Words with
        Subword Units"): repeatedly join the adjacent pair of lowest rank, leftmost first."""
        vocab, ranks = self.vocabulary.vocab, self.vocabulary.merge_ranks
        parts = list(word)
        while len(parts) > 1:
            best, best_rank = -1, None
            for index in range(len(parts) - 1):
                rank = ranks.get((parts[index], parts[index + 1]))
                if rank is not None and (best_rank is None or rank < best_rank):
                    best, best_rank = index, rank
            if best < 0:
                break
            parts[best:best + 2] = [parts[best] + parts[best + 1]]
        unk = self.vocabulary.unk_id
        return tuple(vocab.get(part, unk) for part in parts)


def split_language(line: str) -> tuple[str, str]:
    """ComfyUI's `get_lang`: a leading `[xx]` of a supported language -> (xx, the rest), else
    ("en", line)."""
    if line.startswith("[") and line[3:4] == "]":
        lang = line[1:3].lower()
        if lang in LANGUAGES:
            return lang, line[4:]
    return "en", line


class AceLyricsTokenizer:
    """ComfyUI's `LyricsTokenizer` (module doc): `tokenize_with_weights` gives one chunk of
    `(token, weight)` or `(token, weight, word_id)`."""

    embedding_key = EMBEDDING_KEY
    start_token = START_ID
    pad_token = LINE_END_ID
    min_length = 1

    def __init__(self, bpe: LyricBpe) -> None:
        self.bpe = bpe

    def encode_line(self, line: str, lang: str) -> list[int]:
        """One non-blank line in language `lang`: its tag, then the cleaned text."""
        text = language_tag(lang) + clean_lyric_line(line, lang)
        return self.bpe.encode(text.replace(" ", SPACE_TOKEN))

    def lyric_ids(self, text: str) -> list[int]:
        """ComfyUI's `VoiceBpeTokenizer(text)["input_ids"]`: 261, then each line's tokens and 2."""
        ids = [START_ID]
        for raw in text.split("\n"):
            line = raw.strip()
            if not line:
                ids.append(LINE_END_ID)
                continue
            lang, line = split_language(line)
            romaji = japanese_to_romaji(line)
            if romaji != line:
                lang, line = "ja", romaji
            ids.extend(self.encode_line(line, "en" if _STRUCTURE.match(line) else lang))
            ids.append(LINE_END_ID)
        return ids

    def tokenize_with_weights(self, text: str, return_word_ids: bool = False, **kwargs: Any) -> list[list[tuple]]:
        options = kwargs.get("tokenizer_options") or {}
        min_length = options.get(f"{EMBEDDING_KEY}_min_length", self.min_length)
        min_padding = options.get(f"{EMBEDDING_KEY}_min_padding")
        escaped = escape_important(text)
        segments = [(escaped, 1.0)] if kwargs.get("disable_weights", False) else parse_weights(escaped)
        chunk: list[tuple] = [(START_ID, 1.0, 0)]
        word_id = 0
        for segment, weight in segments:
            for piece in _split_embeddings(unescape_important(segment)):
                word_id += 1
                chunk.extend((token, weight, word_id) for token in self.lyric_ids(piece)[1:])
        if min_padding is not None:
            chunk.extend([(LINE_END_ID, 1.0, 0)] * int(min_padding))
        if min_length is not None and len(chunk) < int(min_length):
            chunk.extend([(LINE_END_ID, 1.0, 0)] * (int(min_length) - len(chunk)))
        if not return_word_ids:
            return [[(t, w) for t, w, _ in chunk]]
        return [chunk]


@cache
def shared_lyrics_tokenizer() -> AceLyricsTokenizer:
    """One tokenizer over the shipped vocabulary for the process (immutable but for its bounded
    word cache)."""
    return AceLyricsTokenizer(LyricBpe(load_lyric_vocabulary()))


__all__ = ["AceLyricsTokenizer", "DEFAULT_VOCABULARY", "LANGUAGES", "LINE_END_ID", "LyricBpe", "LyricVocabulary",
           "START_ID", "language_tag", "load_lyric_vocabulary", "shared_lyrics_tokenizer", "split_language"]
