"""GGUF text-encoder files (llama.cpp's quantisations of the LLM towers: Qwen3, Qwen2.5-VL's
language model, Llama 3, Mistral Small 3, Gemma 2) opened as our towers' state dicts.

What city96's ComfyUI-GGUF does for its `CLIPLoaderGGUF` (`loader.py: gguf_clip_loader`), read
here from the file's own metadata: llama.cpp's tensor names (`token_embd`, `blk.N.attn_q`,
`blk.N.ffn_gate`, `output_norm`, `output`, ...) renamed to the Hugging Face / ComfyUI ones
(`model.embed_tokens`, `model.layers.N.self_attn.q_proj`, ...); llama.cpp's converter permutes the
rows of Llama's (and Mistral's) q and k projections for its interleaved RoPE, undone here with the
head counts of the file's `llama.attention.head_count(_kv)` (ComfyUI-GGUF assumes 32 / 8); its
Gemma 2 converter stores every RMSNorm weight plus one (Gemma's norm multiplies by `1 + w`),
taken off here (as transformers' GGUF loader does).

The linear weights stay quantised (`comfy_core.weights.gguf.GGUFTensor`, views of the file
mapping; each tower's loader makes them `GGUFLinear` layers, dequantised per call). A quantised
token table is dequantised once to float16 (ComfyUI-GGUF does the same: a lookup table is read
by rows, and the LM head of generation shares it); unquantised tensors (norms, F16 / BF16 / F32
weights) are views of the file as they are.

Tokenizers: Qwen and Llama towers use the vocabularies shipped here, as ComfyUI does; a Mistral
file's tekken tokenizer (which ComfyUI's own files carry as a `tekken_model` tensor) is rebuilt from
the GGUF's `tokenizer.ggml.tokens` / `token_type` (byte-level BPE tokens in GPT-2's byte-to-unicode
spelling; control tokens first) and served under that name; a Gemma 2 file's SentencePiece model
(ComfyUI's `spiece_model`) is rebuilt from its tokens, scores and token types the same way.
"""
from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch

from comfy_core.text_encoders.errors import TextEncoderError, VocabularyError
from comfy_core.weights.gguf import GGUFTensor, dequantize, read_gguf

GGUF_SUFFIX = ".gguf"
TEKKEN_KEY = "tekken_model"
SPIECE_KEY = "spiece_model"  # Gemma's SentencePiece model, as ComfyUI's files carry it
# llama.cpp architectures (`general.architecture`) of the towers read here.
ARCHITECTURES = ("llama", "qwen2", "qwen2vl", "qwen3", "gemma2")
_BLOCK = re.compile(r"blk\.(\d+)\.(.+)$")
# llama.cpp's block tensor names -> ours (relative to `model.layers.N.`).
_BLOCK_NAMES = {
    "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj", "ffn_norm": "post_attention_layernorm",
}
# Gemma 2's sandwich norms (llama.cpp: `post_attention_norm`, `ffn_norm` before the MLP, `post_ffw_norm`).
_GEMMA_BLOCK_NAMES = {**_BLOCK_NAMES, "post_attention_norm": "post_attention_layernorm",
                      "ffn_norm": "pre_feedforward_layernorm", "post_ffw_norm": "post_feedforward_layernorm"}
_TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
TOKEN_NORMAL, TOKEN_CONTROL = 1, 3  # llama.cpp's token types


class GGUFTextEncoderError(TextEncoderError):
    """A GGUF file that is not a text encoder read here: another architecture, a tensor llama.cpp
    names in a way no tower has, or metadata the renaming needs and the file lacks."""


class _Info:
    """A header entry for detection: the torch `shape` and the `dtype` name ("Q8_0", "F16", ...)."""

    def __init__(self, shape: tuple[int, ...], dtype: str) -> None:
        self.shape, self.dtype = shape, dtype


def is_gguf(path: Any) -> bool:
    return isinstance(path, (str, Path)) and str(path).lower().endswith(GGUF_SUFFIX)


def llama_cpp_name(name: str, architecture: str) -> str:
    """A llama.cpp tensor name -> ours (`GGUFTextEncoderError` for one no tower has)."""
    base, dot, kind = name.rpartition(".")
    if kind not in ("weight", "bias"):
        raise GGUFTextEncoderError(f"GGUF tensor {name!r} is neither a weight nor a bias")
    match = _BLOCK.match(base)
    if match:
        table = _GEMMA_BLOCK_NAMES if architecture == "gemma2" else _BLOCK_NAMES
        if match.group(2) not in table:
            raise GGUFTextEncoderError(f"GGUF tensor {name!r}: {match.group(2)!r} is not a block tensor of a "
                                       f"{architecture} text encoder")
        return f"model.layers.{match.group(1)}.{table[match.group(2)]}.{kind}"
    if base not in _TOP_NAMES:
        raise GGUFTextEncoderError(f"GGUF tensor {name!r} is not a tensor of a {architecture} text encoder")
    return f"{_TOP_NAMES[base]}.{kind}"


def unpermute_rows(rows: int, heads: int) -> torch.Tensor:
    """The row order that undoes llama.cpp's q/k permutation for `heads` heads: its converter
    reorders each head's rows from two halves (rotate-half RoPE) to interleaved pairs; row
    `h*d + 2*i + j` of the file is row `h*d + j*d/2 + i` of the original."""
    if rows % (2 * heads):
        raise GGUFTextEncoderError(f"GGUF q/k projection: {rows} rows do not split into {heads} heads of pairs")
    half = rows // heads // 2
    # original index (h, j, i) sits at file index (h, i, j): gather file rows in original order.
    index = torch.arange(rows).reshape(heads, half, 2).transpose(1, 2).reshape(rows)
    return index


def tekken_from_gguf(metadata: Mapping[str, Any], source: str) -> torch.Tensor:
    """Mistral's tekken JSON (see `tekken_tokenizer.py`) rebuilt from a GGUF's byte-level BPE
    vocabulary, as a uint8 tensor: the leading control tokens are the special tokens (by id), every
    later token a regular one of rank `id - specials`, its bytes from GPT-2's byte-to-unicode
    spelling. `VocabularyError` for a vocabulary of another shape."""
    from comfy_core.text_encoders.vocab import bytes_to_unicode

    tokens = metadata.get("tokenizer.ggml.tokens")
    types = metadata.get("tokenizer.ggml.token_type")
    if metadata.get("tokenizer.ggml.model") != "gpt2" or not tokens or types is None or len(types) != len(tokens):
        raise VocabularyError(f"{source}: no byte-level BPE vocabulary (tokenizer.ggml.model 'gpt2' with tokens and "
                              "token types) to rebuild Mistral's tekken tokenizer from")
    specials = 0
    while specials < len(types) and types[specials] != TOKEN_NORMAL:
        specials += 1
    if any(t != TOKEN_NORMAL for t in types[specials:]):
        raise VocabularyError(f"{source}: control tokens after the first regular token (id {specials}); a tekken "
                              "vocabulary has its special tokens first")
    to_byte = {char: byte for byte, char in bytes_to_unicode().items()}
    vocab = []
    for rank, token in enumerate(tokens[specials:]):
        try:
            raw = bytes(to_byte[c] for c in token)
        except KeyError:
            raise VocabularyError(f"{source}: token {specials + rank} {token!r} is not in GPT-2's byte spelling") from None
        vocab.append({"rank": rank, "token_bytes": base64.b64encode(raw).decode("ascii")})
    data = {"config": {"default_vocab_size": len(tokens), "default_num_special_tokens": specials},
            "vocab": vocab,
            "special_tokens": [{"rank": i, "token_str": tokens[i], "is_control": True} for i in range(specials)]}
    return torch.tensor(list(json.dumps(data).encode("utf-8")), dtype=torch.uint8)


def spiece_from_gguf(metadata: Mapping[str, Any], source: str) -> torch.Tensor:
    """A SentencePiece model (serialized `ModelProto`, as a uint8 tensor: Gemma's `spiece_model`)
    rebuilt from a GGUF's SentencePiece vocabulary (`tokenizer.ggml.model` "llama": tokens, scores,
    token types, the special ids, `add_space_prefix`, `remove_extra_whitespaces`): a BPE model with
    llama.cpp's piece types, byte fallback when it has byte pieces, and no normalisation beyond
    whitespace handling (llama.cpp keeps no normaliser for these vocabularies; Gemma's own is the
    identity). `VocabularyError` for a vocabulary of another kind."""
    from sentencepiece import sentencepiece_model_pb2

    tokens = metadata.get("tokenizer.ggml.tokens")
    scores = metadata.get("tokenizer.ggml.scores")
    types = metadata.get("tokenizer.ggml.token_type")
    if metadata.get("tokenizer.ggml.model") != "llama" or not tokens or scores is None or types is None \
            or not len(tokens) == len(scores) == len(types):
        raise VocabularyError(f"{source}: no SentencePiece vocabulary (tokenizer.ggml.model 'llama' with tokens, scores "
                              "and token types) to rebuild the tokenizer from")
    model = sentencepiece_model_pb2.ModelProto()
    for token, score, kind in zip(tokens, scores, types):
        if not 1 <= int(kind) <= 6:
            raise VocabularyError(f"{source}: token {token!r} has the unknown token type {kind}")
        piece = model.pieces.add()
        piece.piece, piece.score, piece.type = token, float(score), int(kind)
    trainer = model.trainer_spec
    trainer.model_type = sentencepiece_model_pb2.TrainerSpec.BPE
    trainer.vocab_size = len(tokens)
    trainer.byte_fallback = any(int(kind) == 6 for kind in types)
    for field, key in (("unk_id", "unknown_token_id"), ("bos_id", "bos_token_id"), ("eos_id", "eos_token_id"),
                       ("pad_id", "padding_token_id")):
        value = metadata.get(f"tokenizer.ggml.{key}")
        setattr(trainer, field, int(value) if value is not None else -1)
    normalizer = model.normalizer_spec
    normalizer.name = "identity"
    normalizer.add_dummy_prefix = bool(metadata.get("tokenizer.ggml.add_space_prefix", True))
    normalizer.remove_extra_whitespaces = bool(metadata.get("tokenizer.ggml.remove_extra_whitespaces", False))
    normalizer.escape_whitespaces = True
    return torch.tensor(list(model.SerializeToString()), dtype=torch.uint8)


class GGUFTextEncoderFile:
    """A GGUF text-encoder file seen as the loaders see a checkpoint: `path`, `tensors` (our names
    -> entries with `shape` and `dtype`), `metadata` (the GGUF key/values), `read(name)`, and
    `state_dict()` (our names -> tensors, the quantised weights as `GGUFTensor`s). See the module
    docstring for the renaming."""

    format = "gguf"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        raw, self.metadata = read_gguf(self.path)
        self.architecture = str(self.metadata.get("general.architecture", ""))
        if self.architecture not in ARCHITECTURES:
            raise GGUFTextEncoderError(
                f"{self.path}: GGUF architecture {self.architecture or '(none)'!r} is not a text encoder read here "
                f"(only {', '.join(ARCHITECTURES)})")
        self._state: dict[str, Any] = {}
        for name, tensor in raw.items():
            ours = llama_cpp_name(name, self.architecture)
            if ours in self._state:
                raise GGUFTextEncoderError(f"{self.path}: two GGUF tensors map to {ours!r}")
            self._state[ours] = self._converted(ours, tensor)
        if self._is_mistral():
            self._state[TEKKEN_KEY] = tekken_from_gguf(self.metadata, str(self.path))
        if self.architecture == "gemma2" and "tokenizer.ggml.tokens" in self.metadata:
            self._state[SPIECE_KEY] = spiece_from_gguf(self.metadata, str(self.path))
        self.tensors = {name: _Info(tuple(int(d) for d in value.shape),
                                    value.dtype if isinstance(value, GGUFTensor) else _dtype_name(value.dtype))
                        for name, value in self._state.items()}

    def _converted(self, name: str, tensor: GGUFTensor) -> Any:
        """One tensor under our name: q/k rows restored (Llama), Gemma's norms less one, a
        quantised token table or LM head dequantised to float16, plain ones as views."""
        if self.architecture == "llama" and name.endswith(("self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                                            "self_attn.q_proj.bias", "self_attn.k_proj.bias")):
            heads = self._head_count("head_count_kv" if ".k_proj." in name else "head_count")
            tensor = tensor.select_rows(unpermute_rows(int(tensor.shape[0]), heads))
        if name in ("model.embed_tokens.weight", "lm_head.weight") and tensor.quantized:
            return dequantize(tensor, torch.float16)
        if tensor.quantized:
            return tensor
        value = tensor.plain()
        if self.architecture == "gemma2" and name.endswith("norm.weight"):
            value = value.float() - 1.0
        return value

    def _head_count(self, key: str) -> int:
        full = f"{self.architecture}.attention.{key}"
        value = self.metadata.get(full)
        if value is None and key == "head_count_kv":
            value = self.metadata.get(f"{self.architecture}.attention.head_count")
        if not isinstance(value, int) or value <= 0:
            raise GGUFTextEncoderError(f"{self.path}: the GGUF metadata has no {full!r}, which undoing llama.cpp's "
                                       "q/k row permutation needs")
        return value

    def _is_mistral(self) -> bool:
        """A Mistral Small 3 file (llama.cpp's `llama` architecture; ComfyUI's width / table rule)."""
        embed = self._state.get("model.embed_tokens.weight")
        return self.architecture == "llama" and embed is not None and (
            int(embed.shape[1]) == 5120 or int(embed.shape[0]) == 131072
            or self.metadata.get("tokenizer.ggml.pre") == "tekken")

    # --- the checkpoint surface the text-encoder loaders use ---

    def __enter__(self) -> "GGUFTextEncoderFile":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def __contains__(self, name: object) -> bool:
        return name in self._state

    def keys(self) -> Iterator[str]:
        return iter(self._state)

    def read(self, name: str, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Tensor `name` as values (a quantised one dequantised), cast to `dtype` unless None."""
        value = self._state[name]
        if isinstance(value, GGUFTensor):
            return dequantize(value, dtype or torch.float32)
        return value if dtype is None else value.to(dtype)

    def state_dict(self) -> Mapping[str, Any]:
        """Our names -> tensors as held (quantised weights as `GGUFTensor`s)."""
        return dict(self._state)


def _dtype_name(dtype: torch.dtype) -> str:
    from comfy_core.checkpoint.reader import DTYPE_NAMES

    return DTYPE_NAMES.get(dtype, str(dtype))


__all__ = ["ARCHITECTURES", "GGUFTextEncoderError", "GGUFTextEncoderFile", "is_gguf", "llama_cpp_name",
           "spiece_from_gguf", "tekken_from_gguf", "unpermute_rows"]
