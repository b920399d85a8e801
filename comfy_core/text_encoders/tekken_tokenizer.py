"""Mistral's "tekken" tokenizer (a tiktoken-style byte-level BPE) read from the text-encoder file,
with ComfyUI's `tokenize_with_weights` behaviour for Flux.2 dev's Mistral Small 3 encoder
(ComfyUI's `comfy/text_encoders/flux.py`: `Mistral3Tokenizer`, `load_mistral_tokenizer`;
`bpe_tokenizer.py`: `from_tekken_json`).

Where the data comes from: ComfyUI ships no Mistral vocabulary. Its repackaged
`mistral_3_small_flux2_*.safetensors` carry Mistral's `tekken.json` as a uint8 tensor named
`tekken_model` (as umT5 files carry `spiece_model`); ComfyUI's loader passes it on as
`tokenizer_data["tekken_model"]`. A file without it is a `MissingTekkenError`.

The JSON (Mistral's `mistral-common` format): `config` (`default_vocab_size`,
`default_num_special_tokens`, ...), `vocab` (entries `{"rank", "token_bytes" (base64)}`, ordered by
rank) and `special_tokens` (entries `{"rank", "token_str"}`: `<unk>` 0, `<s>` 1, `</s>` 2, `[INST]` 3,
`[/INST]` 4, `<pad>` 11, `[SYSTEM_PROMPT]` 17, `[/SYSTEM_PROMPT]` 18, ...). Token ids: the special
tokens keep their rank; a regular token's id is its rank plus `default_num_special_tokens` (1000),
and only ranks below `default_vocab_size - default_num_special_tokens` are used (ComfyUI's reading).

Encoding, as ComfyUI's: the special tokens' strings are matched in the raw text first; the rest is
split by Llama 3's pre-tokenizer expression (ComfyUI uses it for tekken data, whatever the JSON's
`config.pattern` says) and each piece's bytes merged by rank (tiktoken's rule; the `tokenizers`
library runs it with merges derived from the ranks: `llama_tokenizer.merges_from_ranks`). The
tokenizer adds no start token itself; `MistralTokenizer` puts `<s>` (1) in front.

`MistralTokenizer` is ComfyUI's `SDTokenizer` as `Mistral3Tokenizer` configures it: start token 1,
no end token, one chunk for any prompt length, padding on the left with `<pad>` (11) up to
`min_length` (1: no padding for one prompt), prompt weights disabled, embedding key
`mistral3_24b`.
"""
from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any

import torch

from comfy_core.text_encoders.errors import TextEncoderError, VocabularyError
from comfy_core.text_encoders.llama_tokenizer import LlamaTokenizer, byte_level_bpe, merges_from_ranks
from comfy_core.text_encoders.qwen_tokenizer import NO_CHUNKING, EmbeddingLookup
from comfy_core.text_encoders.vocab import bytes_to_unicode

if TYPE_CHECKING:
    from tokenizers import Tokenizer

TEKKEN_KEY = "tekken_model"  # the tensor holding Mistral's tekken.json
MISTRAL_START_ID = 1  # <s>
MISTRAL_PAD_ID = 11  # <pad>: what ComfyUI's Mistral3Tokenizer pads with
MISTRAL_EMBEDDING_KEY = "mistral3_24b"


class MissingTekkenError(TextEncoderError):
    """A Mistral text-encoder file without the `tekken_model` tensor: nothing to tokenize with."""

    def __init__(self, source: str) -> None:
        super().__init__(f"{source}: this Mistral text encoder file has no tokenizer (no {TEKKEN_KEY!r} tensor). "
                         "Mistral's tekken tokenizer travels inside ComfyUI's repackaged "
                         "mistral_3_small_flux2_*.safetensors files; use one of those")


def tekken_bytes(data: Any, source: str = TEKKEN_KEY) -> bytes:
    """The JSON bytes from a `tekken_model` tensor (uint8 [n]) or raw bytes / str."""
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, (bytes, bytearray)):
        return bytes(data)
    if not isinstance(data, torch.Tensor) or data.dtype != torch.uint8 or data.dim() != 1:
        raise VocabularyError(f"{source}: expected a 1-D uint8 tensor holding Mistral's tekken.json, got "
                              f"{getattr(data, 'dtype', type(data).__name__)} {tuple(getattr(data, 'shape', ()))}")
    return data.cpu().numpy().tobytes()


def parse_tekken(data: Any, source: str = TEKKEN_KEY) -> tuple[dict[bytes, int], dict[str, int], int]:
    """tekken JSON -> (regular token bytes -> id, special token string -> id, number of special ids).
    Malformed data is a `VocabularyError` naming what is wrong."""
    try:
        tekken = json.loads(tekken_bytes(data, source))
        config = tekken["config"]
        offset = int(config["default_num_special_tokens"])
        limit = int(config["default_vocab_size"]) - offset
        regular: dict[bytes, int] = {}
        for entry in tekken["vocab"]:
            rank = int(entry["rank"])
            if rank < limit:
                regular[base64.b64decode(entry["token_bytes"], validate=True)] = rank + offset
        specials = {str(entry["token_str"]): int(entry["rank"]) for entry in tekken["special_tokens"]}
    except (ValueError, KeyError, TypeError) as exc:
        raise VocabularyError(f"{source}: not a Mistral tekken tokenizer ({type(exc).__name__}: {exc})") from None
    ranks = sorted(regular.values())
    if ranks != list(range(offset, offset + len(ranks))):
        raise VocabularyError(f"{source}: tekken vocabulary ranks are not 0..{len(ranks) - 1} without gaps")
    if any(not 0 <= i < offset for i in specials.values()) or len(set(specials.values())) != len(specials):
        raise VocabularyError(f"{source}: tekken special tokens must have distinct ranks below {offset}")
    missing = [i for i in range(256) if bytes([i]) not in regular]
    if missing:
        raise VocabularyError(f"{source}: tekken vocabulary lacks the single bytes {missing[:8]}")
    return regular, specials, offset


def build_tekken_tokenizer(data: Any, source: str = TEKKEN_KEY) -> "Tokenizer":
    """A `tokenizers.Tokenizer` over the tekken JSON (bytes, str or the file's uint8 tensor)."""
    from tokenizers import AddedToken

    regular, specials, _ = parse_tekken(data, source)
    alphabet = bytes_to_unicode()

    def text(token: bytes) -> str:
        return "".join(alphabet[b] for b in token)

    vocab = {text(token): index for token, index in regular.items()}
    clashes = sorted(s for s in specials if s in vocab)
    if clashes:
        raise VocabularyError(f"{source}: special tokens {clashes[:5]} are also regular tokens")
    vocab.update(specials)
    merges = [(text(a), text(b)) for a, b in merges_from_ranks(regular)]
    tokenizer = byte_level_bpe(vocab, merges)
    tokenizer.add_special_tokens([AddedToken(content, single_word=False, lstrip=False, rstrip=False,
                                             normalized=False, special=True)
                                  for content, _ in sorted(specials.items(), key=lambda item: item[1])])
    for content, index in specials.items():
        if tokenizer.token_to_id(content) != index:
            raise VocabularyError(f"{source}: special token {content} got id {tokenizer.token_to_id(content)}, "
                                  f"expected {index}")
    return tokenizer


class MistralTokenizer(LlamaTokenizer):
    """ComfyUI's `Mistral3Tokenizer` (see the module doc): the Llama tokenizer's weights, embeddings
    and chunking with `<s>` in front, over the file's tekken data, padded on the left."""

    def __init__(self, embedding_key: str = MISTRAL_EMBEDDING_KEY, embedding_width: int = 5120,
                 min_length: int | None = 1, min_padding: int | None = None, max_length: int = NO_CHUNKING,
                 pad_token: int = MISTRAL_PAD_ID, embedding_lookup: EmbeddingLookup | None = None,
                 disable_weights: bool = True, backend: "Tokenizer | None" = None,
                 tekken_data: Any = None) -> None:
        if backend is None:
            if tekken_data is None:
                raise MissingTekkenError("the Mistral tokenizer")
            backend = build_tekken_tokenizer(tekken_data)
        super().__init__(embedding_key, embedding_width, min_length, min_padding, max_length, pad_token,
                         embedding_lookup, disable_weights, backend)
        self.tekken_data = tekken_data
        self.start_token = MISTRAL_START_ID
        self.pad_left = True

    def with_embedding_lookup(self, lookup: EmbeddingLookup | None) -> "MistralTokenizer":
        if lookup is self.embedding_lookup:
            return self
        return type(self)(self.embedding_key, self.embedding_size, self.min_length, self.min_padding,
                          self.max_length, self.pad_token, lookup, self.disable_weights, self.backend,
                          self.tekken_data)

    def state_dict(self) -> dict:
        """ComfyUI's `Mistral3Tokenizer.state_dict`: the tekken data, so a saved CLIP keeps it."""
        return {TEKKEN_KEY: self.tekken_data}

    def _pack(self, groups: list[list[tuple[Any, float]]], min_length: int | None,
              min_padding: int | None) -> list[list[tuple]]:
        """The Llama batching (start token, groups), with the padding put in front (ComfyUI's
        `pad_left`): before the start token."""
        chunks = LlamaTokenizer._pack(self, groups, None, None)
        last = chunks[-1]
        pads = int(min_padding or 0)
        if min_length is not None:
            pads = max(pads, int(min_length) - len(last))
        last[:0] = [(self.pad_token, 1.0, 0)] * pads
        return chunks


def mistral_tokenizer(tokenizer_data: Any, embedding_width: int = 5120, min_length: int | None = 1,
                      pad_token: int = MISTRAL_PAD_ID, source: str = "the Mistral text encoder",
                      embedding_key: str = MISTRAL_EMBEDDING_KEY) -> MistralTokenizer:
    """The tokenizer for a Mistral tower from ComfyUI's `tokenizer_data` (its `tekken_model`);
    `embedding_key`: the tokens' key (ERNIE-Image's Ministral 3 3B: "ministral3_3b")."""
    data = (tokenizer_data or {}).get(TEKKEN_KEY)
    if data is None:
        raise MissingTekkenError(source)
    return MistralTokenizer(embedding_key=embedding_key, embedding_width=embedding_width, min_length=min_length,
                            pad_token=pad_token, tekken_data=data)


__all__ = ["MISTRAL_PAD_ID", "MISTRAL_START_ID", "MissingTekkenError", "MistralTokenizer", "TEKKEN_KEY",
           "build_tekken_tokenizer", "mistral_tokenizer", "parse_tekken", "tekken_bytes"]
