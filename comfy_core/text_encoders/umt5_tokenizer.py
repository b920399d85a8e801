"""The umT5 tokenizer (SentencePiece unigram, 256k multilingual vocabulary) with ComfyUI's
`tokenize_with_weights` behaviour for Wan's `umt5xxl` encoder.

ComfyUI (`comfy/text_encoders/wan.py: UMT5XXlTokenizer`, `spiece_tokenizer.py: SPieceTokenizer`)
ships no vocabulary for umT5: the text-encoder file carries its own, the serialized SentencePiece
model as a uint8 tensor named `spiece_model` (ComfyUI's repackaged `umt5_xxl_fp16.safetensors` and
`umt5_xxl_fp8_e4m3fn_scaled.safetensors` have it; the original Wan-AI `.pth` and the diffusers /
transformers `UMT5EncoderModel` weights do not). It is read here with the `sentencepiece` package
(`SentencePieceProcessor(model_proto=bytes)`); a file without it is a `MissingTokenizerError`.

Chunking and padding are the T5 tokenizer's (`t5_tokenizer.T5XXLTokenizer`, ComfyUI's `SDTokenizer`
with these settings): no start token, end token the model's `</s>` (1), pad 0, one chunk for any
prompt length, no padding to a maximum, then padding up to `min_length` 512 (`umt5xxl_min_length`
/ `umt5xxl_min_padding` tokenizer options override it). Prompt weights `(word:1.2)` and
`embedding:NAME` (vectors of width 4096, key `umt5xxl`) as for T5.
"""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.text_encoders.errors import TextEncoderError, VocabularyError
from comfy_core.text_encoders.t5_tokenizer import NO_CHUNKING, PAD_ID, EmbeddingLookup, T5XXLTokenizer

SPIECE_KEY = "spiece_model"  # the tensor holding the serialized SentencePiece model
UMT5_MIN_LENGTH = 512  # ComfyUI's UMT5XXlTokenizer(min_length=512)
UMT5_EMBEDDING_WIDTH = 4096
UMT5_EMBEDDING_KEY = "umt5xxl"
FILES_WITH_TOKENIZER = ("umt5_xxl_fp16.safetensors", "umt5_xxl_fp8_e4m3fn_scaled.safetensors")


class MissingTokenizerError(TextEncoderError):
    """A umT5 text-encoder file without the `spiece_model` tensor: nothing to tokenize with."""

    def __init__(self, source: str) -> None:
        super().__init__(
            f"{source}: this umT5 text encoder file has no tokenizer (no {SPIECE_KEY!r} tensor). umT5's "
            f"SentencePiece model travels inside the file: use ComfyUI's repackaged files "
            f"({', '.join(FILES_WITH_TOKENIZER)}), which carry it; the original Wan-AI "
            "models_t5_umt5-xxl-enc-bf16.pth and diffusers' text_encoder weights do not")


class SentencePieceTokenizer:
    """ComfyUI's `SPieceTokenizer` surface over a `sentencepiece.SentencePieceProcessor` (what
    `UMT5XXlTokenizer.tokenizer` is there): `tokenizer(text)["input_ids"]` ends with `</s>`,
    `get_vocab()`, `serialize_model()` (the uint8 tensor a file stores)."""

    def __init__(self, model_proto: bytes, source: str = "spiece_model") -> None:
        import sentencepiece

        try:
            self.tokenizer = sentencepiece.SentencePieceProcessor(model_proto=model_proto, add_bos=False, add_eos=True)
        except (RuntimeError, TypeError, OSError) as exc:
            raise VocabularyError(f"{source}: not a SentencePiece model ({exc})") from None
        if self.tokenizer.eos_id() < 0:
            raise VocabularyError(f"{source}: the SentencePiece model has no end-of-sequence piece")
        self.add_eos = True
        self.add_bos = False

    @classmethod
    def from_tensor(cls, tensor: Any, source: str = SPIECE_KEY) -> "SentencePieceTokenizer":
        """From the file's `spiece_model` tensor (uint8 [n]) or the raw bytes."""
        if isinstance(tensor, (bytes, bytearray)):
            return cls(bytes(tensor), source)
        if not isinstance(tensor, torch.Tensor) or tensor.dtype != torch.uint8 or tensor.dim() != 1:
            raise VocabularyError(f"{source}: expected a 1-D uint8 tensor holding a SentencePiece model, got "
                                  f"{getattr(tensor, 'dtype', type(tensor).__name__)} "
                                  f"{tuple(getattr(tensor, 'shape', ()))}")
        return cls(tensor.cpu().numpy().tobytes(), source)

    def __call__(self, text: str) -> dict[str, list[int]]:
        return {"input_ids": self.tokenizer.encode(text)}

    def encode(self, text: str) -> list[int]:
        """The ids of `text` without `</s>`."""
        return list(self.tokenizer.encode(text, add_eos=False))

    @property
    def eos_id(self) -> int:
        return int(self.tokenizer.eos_id())

    def get_vocab(self) -> dict[str, int]:
        return {self.tokenizer.id_to_piece(i): i for i in range(self.tokenizer.get_piece_size())}

    def serialize_model(self) -> torch.Tensor:
        return torch.frombuffer(bytearray(self.tokenizer.serialized_model_proto()), dtype=torch.uint8)


class UMT5XXlTokenizer(T5XXLTokenizer):
    """ComfyUI's `UMT5XXlTokenizer`: T5's chunking over the file's SentencePiece model; a slot of
    `WanT5Tokenizer` (attribute `umt5xxl`, ComfyUI's `clip_umt5xxl`, token key "umt5xxl")."""

    def __init__(self, spiece: SentencePieceTokenizer, min_length: int | None = UMT5_MIN_LENGTH,
                 min_padding: int | None = None, max_length: int = NO_CHUNKING,
                 embedding_lookup: EmbeddingLookup | None = None, embedding_width: int = UMT5_EMBEDDING_WIDTH,
                 embedding_key: str = UMT5_EMBEDDING_KEY) -> None:
        super().__init__(min_length, min_padding, max_length, embedding_lookup, embedding_width, embedding_key,
                         backend=spiece)
        # ComfyUI: the end token is what the tokenizer appends to the empty string (`</s>`, 1).
        self.end_token = spiece.eos_id
        self.pad_token = PAD_ID

    @property
    def tokenizer(self) -> SentencePieceTokenizer:
        return self.backend

    @property
    def inv_vocab(self) -> dict[int, str]:
        cached = self.__dict__.get("_inv_vocab")
        if cached is None:
            cached = self.__dict__["_inv_vocab"] = {i: piece for piece, i in self.backend.get_vocab().items()}
        return cached

    def encode(self, text: str) -> list[int]:
        return self.backend.encode(text)

    def with_embedding_lookup(self, lookup: EmbeddingLookup | None) -> "UMT5XXlTokenizer":
        if lookup is self.embedding_lookup:
            return self
        return UMT5XXlTokenizer(self.backend, self.min_length, self.min_padding, self.max_length, lookup,
                                self.embedding_size, self.embedding_key)

    def state_dict(self) -> dict:
        """ComfyUI's `UMT5XXlTokenizer.state_dict`: the SentencePiece model, so a saved CLIP keeps it."""
        return {SPIECE_KEY: self.backend.serialize_model()}


def umt5_tokenizer(tokenizer_data: Any, min_length: int | None = UMT5_MIN_LENGTH,
                   embedding_width: int = UMT5_EMBEDDING_WIDTH, source: str = "text encoder") -> UMT5XXlTokenizer:
    """The tokenizer from ComfyUI's `tokenizer_data` (`{"spiece_model": tensor}`); a
    `MissingTokenizerError` naming `source` when it holds none."""
    spiece = (tokenizer_data or {}).get(SPIECE_KEY)
    if spiece is None:
        raise MissingTokenizerError(source)
    return UMT5XXlTokenizer(SentencePieceTokenizer.from_tensor(spiece, f"{source}: {SPIECE_KEY}"),
                            min_length=min_length, embedding_width=embedding_width)
