"""The T5Gemma tower as an encoder-set slot (ComfyUI's `comfy/text_encoders/sa3.py`
`T5GemmaSDClipModel` / `T5GemmaSDTokenizer`, Stable Audio 3's text encoder), over the encoder of
`t5gemma.py`; written here.

- `T5GemmaTextEncoder`: ComfyUI's `SDClipModel` surface (our `T5TextEncoder`'s, whose token-weight
  encoding, options and layer selection it keeps) with pad 0 and no start / end token: the
  attention mask is all ones (ComfyUI marks tokens masked only after an end token, which this
  tokenizer never emits), so nothing is masked or zeroed; the output is the final RMS-normed state,
  `[B, T, 768]` float32, no pooled output; `embedding:NAME` vectors replace their positions'
  scaled token embeddings.
- `T5GemmaTokenizer`: the file's SentencePiece model (its `spiece_model` tensor, ComfyUI's
  `tokenizer_data`) without BOS / EOS, one chunk for any length, padded to `min_length` 1 with
  pad 0, prompt weights parsed, tokens under the key `t5gemma`; `state_dict()` gives the
  SentencePiece model back.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

import torch
from torch import nn

from comfy_core.text_encoders.errors import TokenizeError
from comfy_core.text_encoders.gemma_tokenizer import SPIECE_KEY, GemmaSentencePiece, MissingGemmaTokenizerError
from comfy_core.text_encoders.qwen_tokenizer import NO_CHUNKING, QwenTokenizer
from comfy_core.text_encoders.t5 import T5Options, T5TextEncoder, _apply_overrides
from comfy_core.text_encoders.t5gemma import T5GemmaConfig, T5GemmaEncoder, build_t5gemma_encoder
from comfy_core.text_encoders.token_chunks import chunks_to_ids

T5GEMMA_SLOT = "t5gemma"
T5GEMMA_PAD = 0
T5GEMMA_WIDTH = 768


class T5GemmaTextEncoder(T5TextEncoder):
    """See the module docstring. `transformer` is the `T5GemmaEncoder`."""

    def __init__(self, config: T5GemmaConfig, encoder: T5GemmaEncoder) -> None:
        nn.Module.__init__(self)
        self.config = config
        self.transformer = encoder
        self.enable_attention_masks = True  # ComfyUI's T5GemmaSDClipModel switches
        self.return_attention_masks = False
        self.zero_out_masked = True
        self.options = self.default_options = T5Options(slot=config.slot, token_key=config.slot,
                                                        pad_token=T5GEMMA_PAD)

    @property
    def special_tokens(self) -> dict[str, int]:
        return {"pad": int(getattr(self.options, "pad_token", T5GEMMA_PAD))}

    @property
    def num_layers(self) -> int:
        return len(self.transformer.layers)

    @property
    def width(self) -> int:
        return self.config.hidden_size

    def token_embedding(self) -> nn.Module:
        return self.transformer.embed_tokens

    def empty_tokens(self, length: int) -> list[int]:
        """ComfyUI's `gen_empty_tokens` without start and end tokens: `length` pads."""
        return [self.special_tokens["pad"]] * max(1, length)

    def forward(self, tokens: Any) -> tuple:
        rows = tokens.tolist() if isinstance(tokens, torch.Tensor) else [list(row) for row in tokens]
        ids, overrides = chunks_to_ids(rows, self.width, mismatch_pad=self.special_tokens["pad"])
        hidden = self.encode_ids(ids, overrides, layer_idx=self.options.layer_idx,
                                 layer_norm_hidden=self.options.layer_norm_hidden)
        if self.return_attention_masks:
            return hidden, None, {"attention_mask": torch.ones(ids.shape, dtype=torch.long, device=hidden.device)}
        return hidden, None

    def encode_ids(self, ids: torch.Tensor, overrides: Any = (), layer_idx: int | None = None,
                   layer_norm_hidden: bool = True, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """ids [B, T] -> states [B, T, width] float32 (the final normed output, or block `layer_idx`'s,
        through the final norm when `layer_norm_hidden`)."""
        if ids.dim() != 2:
            raise TokenizeError(f"t5gemma: token ids must be [batch, tokens], got shape {tuple(ids.shape)}")
        encoder = self.transformer
        weight = encoder.embed_tokens.weight
        ids = ids.to(device=weight.device, dtype=torch.long)
        x = encoder.embed_tokens(ids)
        x = x * torch.tensor(math.sqrt(self.config.hidden_size), dtype=x.dtype)  # [B, T, W]
        if overrides:
            x = _apply_overrides(x, overrides)
        b, n = ids.shape
        cos, sin = encoder._rope(n, x.device, x.dtype)
        full, sliding = encoder._biases(attention_mask, b, n, x.device, x.dtype)
        target = None if layer_idx is None else (layer_idx if layer_idx >= 0 else self.num_layers + layer_idx)
        hidden = None
        for index, layer in enumerate(encoder.layers):
            x = layer(x, cos, sin, sliding if self.config.sliding(index) else full)
            if index == target:
                hidden = x
        if hidden is None:
            return encoder.norm(x).float()
        return (encoder.norm(hidden) if layer_norm_hidden else hidden).float()


def build_t5gemma_clip(config: T5GemmaConfig, state_dict: Mapping[str, torch.Tensor],
                       dtype: torch.dtype | None = None) -> T5GemmaTextEncoder:
    return T5GemmaTextEncoder(config, build_t5gemma_encoder(config, state_dict, dtype or torch.float32))


class T5GemmaTokenizer(QwenTokenizer):
    """See the module docstring (ComfyUI's `T5GemmaSDTokenizer`)."""

    def __init__(self, embedding_key: str = T5GEMMA_SLOT, embedding_width: int = T5GEMMA_WIDTH,
                 min_length: int | None = 1, min_padding: int | None = None, max_length: int = NO_CHUNKING,
                 pad_token: int = T5GEMMA_PAD, embedding_lookup: Any = None, disable_weights: bool = False,
                 backend: GemmaSentencePiece | None = None) -> None:
        if backend is None:
            raise MissingGemmaTokenizerError("the T5Gemma tokenizer")
        super().__init__(embedding_key, embedding_width, min_length, min_padding, max_length, pad_token,
                         embedding_lookup, disable_weights, backend)  # type: ignore[arg-type]

    @property
    def inv_vocab(self) -> dict[int, str]:
        cached = self.__dict__.get("_inv_vocab")
        if cached is None:
            cached = self.__dict__["_inv_vocab"] = {i: piece for piece, i in self.backend.get_vocab().items()}
        return cached

    def encode(self, text: str) -> list[int]:
        """The ids of `text`, no BOS / EOS (ComfyUI's `add_bos=False, add_eos=False`)."""
        return self.backend.encode(text)

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.backend.decode(token_ids)

    def state_dict(self) -> dict:
        return {SPIECE_KEY: self.backend.serialize_model()}


def t5gemma_tokenizer(tokenizer_data: Any, embedding_width: int = T5GEMMA_WIDTH, min_length: int | None = 1,
                      pad_token: int = T5GEMMA_PAD, embedding_key: str = T5GEMMA_SLOT,
                      source: str = "text encoder") -> T5GemmaTokenizer:
    spiece = (tokenizer_data or {}).get(SPIECE_KEY)
    if spiece is None:
        raise MissingGemmaTokenizerError(source)
    return T5GemmaTokenizer(embedding_key, embedding_width, min_length, pad_token=pad_token,
                            backend=GemmaSentencePiece.from_data(spiece, f"{source}: {SPIECE_KEY}"))
