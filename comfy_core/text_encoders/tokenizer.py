"""The raw CLIP BPE tokenizer: text -> ids, without BOS/EOS, no padding, no truncation.

It is transformers' `CLIPTokenizer` (backed by the `tokenizers` library) built in memory from the
vocabulary derived in `vocab.py`, so no file or hub access happens. This is the tokenizer ComfyUI
uses for every CLIP encoder (SD1 CLIP-L, SD2 ViT-H, SDXL L and bigG): NFC normalisation,
whitespace collapsed, lower case, CLIP's pre-tokenisation regex, byte-level BPE.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from comfy_core.text_encoders.vocab import ClipVocabulary, load_vocabulary

if TYPE_CHECKING:
    from transformers import CLIPTokenizer

# Far above any prompt: we chunk ourselves, so the library must neither truncate nor warn.
_NO_LIMIT = 1 << 30


class ClipTokenizer:
    """Text -> CLIP BPE ids. Cheap to share: it holds no per-prompt state."""

    def __init__(self, vocabulary: ClipVocabulary) -> None:
        from transformers import CLIPTokenizer  # heavy import, kept out of module import time

        self.vocabulary = vocabulary
        self._backend = CLIPTokenizer(vocab=dict(vocabulary.vocab), merges=list(vocabulary.merges),
                                      model_max_length=_NO_LIMIT)
        self.bos_id = vocabulary.bos_id
        self.eos_id = vocabulary.eos_id
        self._inverse = {index: token for token, index in vocabulary.vocab.items()}

    @classmethod
    def from_file(cls, path: str | Path | None = None) -> "ClipTokenizer":
        """Build from a `bpe_simple_vocab_16e6.txt.gz` (default: the one shipped by `openai-clip`)."""
        return cls(load_vocabulary(path))

    @staticmethod
    def shared_default() -> "ClipTokenizer":
        """One tokenizer over the default vocabulary for the whole process (it is immutable):
        every checkpoint load after the first skips re-reading and re-deriving the vocabulary."""
        return _shared_default()

    def encode(self, text: str) -> list[int]:
        """The BPE ids of `text`, without BOS/EOS."""
        return list(self._backend(text, add_special_tokens=False)["input_ids"])

    def encode_words(self, words: Sequence[str]) -> list[int]:
        """The BPE ids of text already cleaned and pre-tokenized elsewhere, one word at a time.

        The hook for callers that clean and split text their own way before BPE (the
        AUTOMATIC1111 nodes replicate webui's tokenizers: `comfy_core.prompt.webui_tokenizer`).
        Each word is BPE-encoded on its own, so no word boundary is merged or moved; a word
        that is already lower-case NFC text without whitespace passes this library's
        normaliser and pre-tokenizer unchanged. `encode` (ComfyUI's path) does not use it.
        """
        if not words:
            return []
        return list(self._backend(list(words), is_split_into_words=True, add_special_tokens=False)["input_ids"])

    def encode_with_specials(self, text: str) -> list[int]:
        """BOS + ids + EOS, unpadded (what `CLIPTokenizer(text)` returns)."""
        return [self.bos_id, *self.encode(text), self.eos_id]

    def token_text(self, token_id: int) -> str:
        """The vocabulary entry of one id (e.g. `cat</w>`), for untokenize/debugging."""
        return self._inverse[token_id]

    def get_vocab(self) -> dict[str, int]:
        return dict(self.vocabulary.vocab)

    @property
    def backend(self) -> "CLIPTokenizer":
        """The transformers `CLIPTokenizer` this wraps: ComfyUI's `SDTokenizer.tokenizer`, which
        packs call directly (`tokenizer(texts, add_special_tokens=False)["input_ids"]`)."""
        return self._backend

    @property
    def inverse_vocab(self) -> dict[int, str]:
        """id -> vocabulary entry (ComfyUI's `SDTokenizer.inv_vocab`); shared, do not modify."""
        return self._inverse


_SHARED_LOCK = threading.Lock()
_shared: ClipTokenizer | None = None


def _shared_default() -> ClipTokenizer:
    # Built once even when two threads ask first at the same time (the server's warm-up thread
    # and a prompt's loader): the second waits for the first's tokenizer.
    global _shared
    if _shared is None:
        with _SHARED_LOCK:
            if _shared is None:
                _shared = ClipTokenizer.from_file()
    return _shared
