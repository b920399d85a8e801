"""The Gemma tokenizer (SentencePiece, Gemma 2's 256,000-piece vocabulary) with ComfyUI's
`tokenize_with_weights` behaviour for Lumina 2's Gemma 2 2B encoder (`comfy/text_encoders/
lumina2.py: Gemma2BTokenizer`, an `SDTokenizer` over `spiece_tokenizer.SPieceTokenizer`).

Vocabulary: ComfyUI ships none for Gemma 2; its text-encoder file carries its own, the serialized
SentencePiece model as the uint8 tensor `spiece_model` (ComfyUI's `gemma_2_2b_fp16.safetensors`
has it; its loader passes it on as `tokenizer_data`). It is read with the `sentencepiece` package
(`SentencePieceProcessor(model_proto=bytes)`); a Gemma file without one needs the model given
explicitly (`tokenizer_data={"spiece_model": bytes or tensor}`, e.g. Gemma 2's `tokenizer.model`
read from a path, `load_spiece_model`), else it is a `MissingGemmaTokenizerError`. Nothing of
Gemma's is copied into this repository (see `data/PROVENANCE.md`: Gemma Terms of Use).

Chunking is ComfyUI's `SDTokenizer` as `Gemma2BTokenizer` configures it (the Llama tokenizer's,
`llama_tokenizer.LlamaTokenizer`): a start token, `<bos>` (2, what SentencePiece puts before the
empty string with `add_bos`), no end token, one chunk for any prompt length (max_length 99999999),
no padding to the maximum, `min_length` 1, pad `<pad>` (0), prompt weights `(word:1.2)` parsed,
`embedding:NAME` looked up (vectors 2304 wide, key `gemma2_2b`). Each piece of text is encoded by
SentencePiece as it is (Gemma's control pieces such as `<start_of_turn>` are user-defined pieces
there, so they are matched in the text).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from comfy_core.text_encoders.errors import TextEncoderError, VocabularyError
from comfy_core.text_encoders.gemma import GEMMA2_2B_SLOT, GEMMA2_2B_WIDTH, PAD_ID, START_ID
from comfy_core.text_encoders.llama_tokenizer import LlamaTokenizer
from comfy_core.text_encoders.qwen_tokenizer import NO_CHUNKING, EmbeddingLookup

SPIECE_KEY = "spiece_model"
GEMMA_MIN_LENGTH = 1


class MissingGemmaTokenizerError(TextEncoderError):
    """A Gemma text-encoder file without the `spiece_model` tensor, and no model given."""

    def __init__(self, source: str) -> None:
        super().__init__(
            f"{source}: this Gemma text encoder file has no tokenizer (no {SPIECE_KEY!r} tensor). Use ComfyUI's "
            "repackaged gemma_2_2b_fp16.safetensors, which carries it, or give Gemma 2's tokenizer.model "
            f"as tokenizer_data={{{SPIECE_KEY!r}: ...}}")


def load_spiece_model(path: str | Path) -> bytes:
    """The bytes of a SentencePiece model file (Gemma 2's `tokenizer.model`)."""
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise VocabularyError(f"cannot read the SentencePiece model {str(path)!r}: {exc}") from None


class GemmaSentencePiece:
    """ComfyUI's `SPieceTokenizer` with `add_bos=True, add_eos=False` over a SentencePiece model:
    `tokenizer(text)["input_ids"]` starts with `<bos>`; `get_vocab()`, `serialize_model()`."""

    def __init__(self, model_proto: bytes, source: str = SPIECE_KEY) -> None:
        import sentencepiece

        try:
            self.processor = sentencepiece.SentencePieceProcessor(model_proto=model_proto)
        except (RuntimeError, TypeError, OSError) as exc:
            raise VocabularyError(f"{source}: not a SentencePiece model ({exc})") from None
        if self.processor.bos_id() < 0:
            raise VocabularyError(f"{source}: the SentencePiece model has no beginning-of-sequence piece")

    @classmethod
    def from_data(cls, data: Any, source: str = SPIECE_KEY) -> "GemmaSentencePiece":
        """From the file's `spiece_model` tensor (uint8 [n]), raw bytes, or a path to a model file."""
        if isinstance(data, (str, Path)):
            return cls(load_spiece_model(data), str(data))
        if isinstance(data, (bytes, bytearray)):
            return cls(bytes(data), source)
        if not isinstance(data, torch.Tensor) or data.dtype != torch.uint8 or data.dim() != 1:
            raise VocabularyError(f"{source}: expected a 1-D uint8 tensor holding a SentencePiece model, got "
                                  f"{getattr(data, 'dtype', type(data).__name__)} {tuple(getattr(data, 'shape', ()))}")
        return cls(data.cpu().numpy().tobytes(), source)

    def __call__(self, text: str) -> dict[str, list[int]]:
        return {"input_ids": [self.bos_id] + self.encode(text)}

    @property
    def bos_id(self) -> int:
        return int(self.processor.bos_id())

    def encode(self, text: str) -> list[int]:
        """The ids of `text` without `<bos>`."""
        return list(self.processor.encode(text))

    def decode(self, ids: list[int]) -> str:
        return self.processor.decode([int(i) for i in ids])

    def get_vocab(self) -> dict[str, int]:
        return {self.processor.id_to_piece(i): i for i in range(self.processor.get_piece_size())}

    def serialize_model(self) -> torch.Tensor:
        return torch.frombuffer(bytearray(self.processor.serialized_model_proto()), dtype=torch.uint8)


class GemmaTokenizer(LlamaTokenizer):
    """ComfyUI's `Gemma2BTokenizer` (see the module doc): the Llama tokenizer's weights, embeddings,
    chunking and start token over the file's SentencePiece model."""

    def __init__(self, embedding_key: str = GEMMA2_2B_SLOT, embedding_width: int = GEMMA2_2B_WIDTH,
                 min_length: int | None = GEMMA_MIN_LENGTH, min_padding: int | None = None,
                 max_length: int = NO_CHUNKING, pad_token: int = PAD_ID,
                 embedding_lookup: EmbeddingLookup | None = None, disable_weights: bool = False,
                 backend: GemmaSentencePiece | None = None) -> None:
        if backend is None:
            raise MissingGemmaTokenizerError("the Gemma tokenizer")
        super().__init__(embedding_key, embedding_width, min_length, min_padding, max_length, pad_token,
                         embedding_lookup, disable_weights, backend)  # type: ignore[arg-type]
        self.start_token = backend.bos_id if backend.bos_id >= 0 else START_ID

    @property
    def inv_vocab(self) -> dict[int, str]:
        cached = self.__dict__.get("_inv_vocab")
        if cached is None:
            cached = self.__dict__["_inv_vocab"] = {i: piece for piece, i in self.backend.get_vocab().items()}
        return cached

    def encode(self, text: str) -> list[int]:
        """The ids of `text` without the start token (ComfyUI drops it from each piece)."""
        return self.backend.encode(text)

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.backend.decode(token_ids)

    def state_dict(self) -> dict:
        """ComfyUI's `Gemma2BTokenizer.state_dict`: the SentencePiece model, so a saved CLIP keeps it."""
        return {SPIECE_KEY: self.backend.serialize_model()}


def gemma_tokenizer(tokenizer_data: Any, embedding_width: int = GEMMA2_2B_WIDTH, min_length: int | None = 1,
                    pad_token: int = PAD_ID, embedding_key: str = GEMMA2_2B_SLOT,
                    source: str = "text encoder") -> GemmaTokenizer:
    """The tokenizer from ComfyUI's `tokenizer_data` (`{"spiece_model": tensor, bytes or path}`);
    a `MissingGemmaTokenizerError` naming `source` when it holds none."""
    spiece = (tokenizer_data or {}).get(SPIECE_KEY)
    if spiece is None:
        raise MissingGemmaTokenizerError(source)
    return GemmaTokenizer(embedding_key, embedding_width, min_length, pad_token=pad_token,
                          backend=GemmaSentencePiece.from_data(spiece, f"{source}: {SPIECE_KEY}"))


__all__ = ["GemmaSentencePiece", "GemmaTokenizer", "MissingGemmaTokenizerError", "SPIECE_KEY", "gemma_tokenizer",
           "load_spiece_model"]
