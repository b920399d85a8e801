"""webui's tokenizers: text cleaning and pre-tokenization before CLIP's BPE, per encoder library.

webui 1.10 tokenizes each parsed segment with the tokenizer of the library wrapping the encoder
(`modules/sd_hijack_clip.py`, `modules/sd_hijack_open_clip.py`), and the two clean differently.
Written here from reading transformers 4.30.2 (webui's pin) `models/clip/tokenization_clip.py`
with `tokenization_utils.py`, and open-clip-torch 2.20.0 `open_clip/tokenizer.py`:

- "transformers" (SD1 CLIP-L, SDXL CLIP-L): the slow `CLIPTokenizer`. The text is first split
  around the literal special strings `<|startoftext|>` / `<|endoftext|>` (exact, case-sensitive:
  the added-tokens trie; they become their ids). With ftfy installed (webui installs it), each
  other piece is put through `ftfy.fix_text`, whitespace runs become one space, the ends are
  stripped and the piece is lower-cased. (The model's tokenizer config has `do_lower_case`, but
  the slow CLIP tokenizer keeps it only as an init argument, so the base class's lower-casing
  pass before the split does not run.)
- "open_clip" (SD2 ViT-H, SDXL CLIP-G): open_clip's `SimpleTokenizer.encode`. The whole text goes
  through `ftfy.fix_text`, then `html.unescape` twice, is stripped, whitespace-collapsed and
  lower-cased. Its special strings are `<start_of_text>` / `<end_of_text>`; `<|endoftext|>` is
  ordinary text there.

Both then find CLIP's pre-tokens with the same pattern (contractions, letter runs, single
digits, runs of other non-space characters; case-insensitive, specials first) and BPE each one.
`fix_text` works line by line: it straightens curly quotes, decodes HTML entities (from the
first line holding a `<` on, no longer), fixes mojibake, and folds ligatures and full-width
letters, so e.g. `“Ｃａｔ” &amp; ﬁsh` encodes as `"cat" & fish`. Checked against transformers
4.30.2 (+ tokenizers 0.13.3) and open-clip-torch 2.20.0 with ftfy 6.3.1 on 29 prompts each.

ComfyUI's CLIPTextEncode does none of this (its tokenizer only applies NFC, whitespace collapsing
and lower case), so only the AUTOMATIC1111 encoding uses these; the BPE itself is the shared
`ClipTokenizer`, through its `encode_words` hook.
"""
from __future__ import annotations

import html
from typing import Callable, Literal

import ftfy
import regex

Flavour = Literal["transformers", "open_clip"]
FLAVOURS: tuple[Flavour, ...] = ("transformers", "open_clip")

# CLIP's pre-tokenizer pattern after the library's special strings (both libraries use `regex`).
_WORDS = r"""'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""
_TRANSFORMERS_SPECIALS = {"<|startoftext|>": "bos", "<|endoftext|>": "eos"}
_OPEN_CLIP_SPECIALS = {"<start_of_text>": "bos", "<end_of_text>": "eos"}
_TRANSFORMERS_WORDS = regex.compile(r"<\|startoftext\|>|<\|endoftext\|>|" + _WORDS, regex.IGNORECASE)
_OPEN_CLIP_WORDS = regex.compile(r"<start_of_text>|<end_of_text>|" + _WORDS, regex.IGNORECASE)
# transformers' `tokenize` splits the raw text on its special tokens (exact, case-sensitive) first.
_TRANSFORMERS_SPLIT = regex.compile(r"(<\|startoftext\|>|<\|endoftext\|>)")
_SPACES = regex.compile(r"\s+")


def _whitespace_clean(text: str) -> str:
    return _SPACES.sub(" ", text).strip()


def transformers_clean(text: str) -> str:
    """transformers' slow `CLIPTokenizer` cleaning (with ftfy): fix_text, whitespace, lower case."""
    return _whitespace_clean(ftfy.fix_text(text)).lower()


def open_clip_clean(text: str) -> str:
    """open_clip's `basic_clean` + `whitespace_clean` + lower case."""
    text = html.unescape(html.unescape(ftfy.fix_text(text))).strip()
    return _whitespace_clean(text).lower()


class WebuiTokenizer:
    """`text -> ids` (no BOS/EOS, no truncation) as webui's tokenizer for one encoder library.

    `bpe` is a `ClipTokenizer` (its `encode_words`, `bos_id` and `eos_id` are used).
    """

    def __init__(self, bpe, flavour: Flavour) -> None:
        if flavour not in FLAVOURS:
            raise ValueError(f"tokenizer flavour must be one of {list(FLAVOURS)}, got {flavour!r}")
        self.flavour = flavour
        self._bpe = bpe
        self._special_ids = {"bos": bpe.bos_id, "eos": bpe.eos_id}

    def __call__(self, text: str) -> list[int]:
        if self.flavour == "open_clip":
            return self._words_to_ids(open_clip_clean(text), _OPEN_CLIP_WORDS, _OPEN_CLIP_SPECIALS)
        ids: list[int] = []
        for i, piece in enumerate(_TRANSFORMERS_SPLIT.split(text)):
            if i % 2:  # a captured special string
                ids.append(self._special_ids[_TRANSFORMERS_SPECIALS[piece]])
            elif piece:
                ids.extend(self._words_to_ids(transformers_clean(piece), _TRANSFORMERS_WORDS,
                                              _TRANSFORMERS_SPECIALS))
        return ids

    def _words_to_ids(self, cleaned: str, pattern: regex.Pattern, specials: dict[str, str]) -> list[int]:
        """Pre-tokens of cleaned text -> ids: the library's special strings by id, the rest by BPE."""
        ids: list[int] = []
        words: list[str] = []
        for word in pattern.findall(cleaned):
            special = specials.get(word)  # the text is lower-case already, as the specials
            if special is None:
                words.append(word)
                continue
            ids.extend(self._bpe.encode_words(words))
            words = []
            ids.append(self._special_ids[special])
        ids.extend(self._bpe.encode_words(words))
        return ids


def webui_tokenizer(bpe, flavour: Flavour) -> Callable[[str], list[int]]:
    """The webui tokenizer of `flavour` over the BPE of `bpe` (a `ClipTokenizer`)."""
    return WebuiTokenizer(bpe, flavour)
