"""The ByT5 tokenizer (Xue et al. 2022, "ByT5: Towards a Token-Free Future with Pre-trained
Byte-to-Byte Models"): a text's UTF-8 bytes, each byte `b` the id `b + 3` after `<pad>` (0), `</s>` (1)
and `<unk>` (2). HunyuanVideo 1.5 / HunyuanImage 2.1 run their glyph ByT5-small encoder on the
quoted text of a prompt (ComfyUI's `ByT5SmallTokenizer`: an SDTokenizer with transformers'
ByT5Tokenizer, no start token, `</s>` at the end, one chunk, no padding, minimum length 1).

ComfyUI's glyph vocabulary adds tokens for font and colour tags (`<font-N>`, `<color-N>`) after the
bytes; those tags are tokenized here as their bytes (a prompt naming them gets byte ids).
Chunking, prompt weights and `embedding:` pieces as the T5 tokenizer's (t5_tokenizer.py).
"""
from __future__ import annotations

from typing import Any

from comfy_core.text_encoders.t5_tokenizer import NO_CHUNKING, T5XXLTokenizer

BYTE_OFFSET = 3  # <pad>, </s>, <unk>
SPECIAL = {0: "<pad>", 1: "</s>", 2: "<unk>"}
BYT5_SMALL_WIDTH = 1472
BYT5_KEY = "byt5"


class ByT5Tokenizer(T5XXLTokenizer):
    """A slot tokenizer with ComfyUI's `SDTokenizer` surface; token key "byt5"."""

    def __init__(self, min_length: int | None = 1, min_padding: int | None = None, max_length: int = NO_CHUNKING,
                 embedding_lookup: Any = None, embedding_width: int = BYT5_SMALL_WIDTH,
                 embedding_key: str = BYT5_KEY, backend: Any = None) -> None:
        super().__init__(min_length, min_padding, max_length, embedding_lookup, embedding_width, embedding_key,
                         backend=self)  # no vocabulary file: the bytes are the vocabulary

    @property
    def tokenizer(self) -> "ByT5Tokenizer":
        return self

    @property
    def inv_vocab(self) -> dict[int, str]:
        table = {index + BYTE_OFFSET: bytes([index]).decode("latin-1") for index in range(256)}
        table.update(SPECIAL)
        return table

    def with_embedding_lookup(self, lookup: Any) -> "ByT5Tokenizer":
        if lookup is self.embedding_lookup:
            return self
        return ByT5Tokenizer(self.min_length, self.min_padding, self.max_length, lookup, self.embedding_size,
                             self.embedding_key)

    def encode(self, text: str) -> list[int]:
        """The byte ids of `text`, without `</s>`."""
        return [byte + BYTE_OFFSET for byte in text.encode("utf-8")]
