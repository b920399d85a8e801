"""Anima's text-encoder set (ComfyUI's `comfy/text_encoders/anima.py`; written here): one Qwen3-0.6B
tower (`qwen3_06b`, 1024 wide, `comfy_core.text_encoders.qwen3`), loaded by CLIPLoader type
"stable_diffusion" (ComfyUI builds Anima's encoder for a Qwen3-0.6B file under that type), with
ComfyUI's class names for the set and its tokenizer (`AnimaTEModel`, `AnimaTokenizer`).

- The prompt is tokenized twice: by the Qwen tokenizer (no start / end token, at least one token,
  padded with 151643) with prompt weights parsed but every weight set to 1.0, under key
  "qwen3_06b"; and by the T5 tokenizer (`comfy_core/text_encoders/t5_tokenizer.py`: Google's 32k
  T5 vocabulary shipped in `text_encoders/data/t5_tokenizer.json.gz`, the same as ComfyUI's
  `t5_tokenizer/`; no start token, `</s>` at the end, at least one token, weights kept) under key
  "t5xxl". No T5 model runs: the ids only index the LLM adapter's own table.
- The set returns the tower's final normed states of every token (layer "last"), no pooled
  output, and, with the tower's attention mask, `t5xxl_ids` `[M]` (an embedding in the T5 tokens
  becomes id 0) and `t5xxl_weights` `[M]` of the first T5 chunk: the model's conditioning
  (`AnimaConditions`) runs its adapter on them.

Reduced-width test towers are named `qwen3_06b` by the Qwen3 detection when their token table has
Qwen3-Embedding-0.6B's 151669 rows (`qwen3.EMBEDDING_06B_VOCAB`).
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

from comfy_core.text_encoders.encoder_set import EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.qwen_tokenizer import PAD_ID
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer

QWEN3_06B_SLOT = "qwen3_06b"
QWEN3_06B_WIDTH = 1024
T5_KEY = "t5xxl"


def _t5_tokenizer(lookup: Any = None) -> Any:
    from comfy_core.text_encoders.t5_tokenizer import T5XXLTokenizer

    return T5XXLTokenizer(min_length=1, embedding_lookup=lookup, embedding_key=T5_KEY)


class AnimaTokenizer(FamilyTokenizer):
    """Anima's tokenizer (ComfyUI's `AnimaTokenizer`): the Qwen tokens with weights 1.0 under
    "qwen3_06b", the T5 tokens (weights kept) under "t5xxl"; its `t5xxl` attribute is the T5
    tokenizer, as ComfyUI's."""

    def __init__(self, tokenizers: dict[str, Any]) -> None:
        super().__init__(tokenizers)
        self.t5xxl = _t5_tokenizer()

    def with_embedding_lookup(self, lookup: Any) -> "AnimaTokenizer":
        view = super().with_embedding_lookup(lookup)
        if view is not self:
            view.t5xxl = self.t5xxl.with_embedding_lookup(lookup)
        return view

    def tokenize_with_weights(self, text: str, return_word_ids: bool = False, **kwargs: Any) -> dict[str, list]:
        out = {}
        for key, chunks in super().tokenize_with_weights(text, return_word_ids, **kwargs).items():
            out[key] = [[(t[0], 1.0, *t[2:]) for t in chunk] for chunk in chunks]
        out[T5_KEY] = self.t5xxl.tokenize_with_weights(text, return_word_ids, **kwargs)
        return out

    def untokenize(self, token_weight_pair: list[tuple]) -> list[tuple]:
        return self.t5xxl.untokenize(token_weight_pair)

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        return getattr(self, self.slots[0]).decode(token_ids, skip_special_tokens=skip_special_tokens)


def t5_ids_and_weights(chunk: list[tuple]) -> tuple[torch.Tensor, torch.Tensor]:
    """The ids (an embedding's tensor becomes the pad id 0, as ComfyUI's) and weights of one T5 chunk."""
    ids = [0 if isinstance(pair[0], torch.Tensor) else int(pair[0]) for pair in chunk]
    return torch.tensor(ids, dtype=torch.int32), torch.tensor([float(pair[1]) for pair in chunk])


class AnimaTEModel(TextEncoderSet):
    """Anima's set (ComfyUI's `AnimaTEModel`, an SD1ClipModel named `qwen3_06b`): the tower's
    output plus the T5 ids and weights (see the module docstring)."""

    clip_name, clip = QWEN3_06B_SLOT, QWEN3_06B_SLOT

    def encode_token_weights(self, tokens: Mapping[str, Any], layer_idx: int | None = None,
                             projected_pooled: bool = True) -> tuple:
        cond, pooled, *rest = super().encode_token_weights(tokens, layer_idx=layer_idx,
                                                           projected_pooled=projected_pooled)
        extra = dict(rest[0]) if rest else {}
        t5 = tokens.get(T5_KEY)
        if t5:
            extra["t5xxl_ids"], extra["t5xxl_weights"] = t5_ids_and_weights(list(t5[0]))
        return cond, pooled, extra


ANIMA_TEXT_ENCODERS = EncoderSetSpec(
    "anima", (EncoderOptions(QWEN3_06B_SLOT, QWEN3_06B_SLOT, PAD_ID, None, True, projected_pooled=False,
                             prefixes=(f"text_encoders.{QWEN3_06B_SLOT}.transformer.",), kind="qwen3",
                             nominal_width=QWEN3_06B_WIDTH, min_length=1),),
    QWEN3_06B_SLOT, set_class=AnimaTEModel, tokenizer_class=AnimaTokenizer, clip_types=("stable_diffusion",))

__all__ = ["ANIMA_TEXT_ENCODERS", "AnimaTEModel", "AnimaTokenizer", "QWEN3_06B_SLOT", "t5_ids_and_weights"]
