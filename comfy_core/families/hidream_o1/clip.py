"""HiDream-O1's text encoder (ComfyUI's `comfy/text_encoders/hidream_o1.py`: `HiDreamO1Tokenizer`,
`HiDreamO1TE`): a tokenizer only, since the Qwen3-VL that reads the prompt is the diffusion model
itself. Tokens (under "hidream_o1"): the prompt by Qwen's tokenizer, prompt weights disabled, pads
dropped, in the template `<|im_start|>user\\n{prompt}<|im_end|>\\n<|im_start|>assistant\\n<|boi|><|tms|>`.
"Encoding" returns the ids: the conditioning tensor is the ids as float32 `[1, L, 1]` (a stand-in
that keeps CONDITIONING's shape) and `text_input_ids` `[1, L]` goes with it, which the model turns
into its inputs (`conditioning.HiDreamO1Conditions`). The files carry no tensors for it; a
checkpoint's CLIP is built without reading any (`tokenizer_only_clip`).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Mapping

import torch
from torch import nn

from comfy_core.text_encoders.encoder_set import EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.errors import TokenizeError
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer

SLOT = "hidream_o1"
PAD_ID = 151643
IM_START, IM_END, USER, ASSISTANT, NEWLINE = 151644, 151645, 872, 77091, 198
BOI, TMS = 151669, 151673
PREFIX = (IM_START, USER, NEWLINE)
SUFFIX = (IM_END, NEWLINE, IM_START, ASSISTANT, NEWLINE, BOI, TMS)
WIDTH = 4096  # ComfyUI's embedding size for the tokenizer (no embeddings are looked up)


class HiDreamO1Tokenizer(FamilyTokenizer):
    """ComfyUI's `HiDreamO1Tokenizer` (see the module docstring)."""

    clip_name, clip = SLOT, SLOT

    def tokenize_with_weights(self, text: str, return_word_ids: bool = False, **kwargs: Any) -> dict[str, list]:
        if kwargs.get("image") is not None or kwargs.get("images"):
            raise TokenizeError("HiDream-O1's text encoder takes text only (reference images: "
                                "HiDreamO1ReferenceImages)")
        kwargs.pop("images", None)
        kwargs.pop("image", None)
        kwargs["disable_weights"] = True
        rows = super().tokenize_with_weights(text, return_word_ids, **kwargs)[SLOT]
        body = [pair for pair in rows[0] if int(pair[0]) != PAD_ID]

        def tok(token: int) -> tuple:
            return (token, 1.0, 0) if return_word_ids else (token, 1.0)

        return {SLOT: [[tok(t) for t in PREFIX] + body + [tok(t) for t in SUFFIX]]}

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        return getattr(self, SLOT).decode(token_ids, skip_special_tokens=skip_special_tokens)


class HiDreamO1TE(nn.Module):
    """ComfyUI's `HiDreamO1TE`: no weights; `encode_token_weights` returns the ids."""

    def __init__(self) -> None:
        super().__init__()
        # a buffer gives the module a device and dtype for the patcher (ComfyUI's TE has none)
        self.register_buffer("anchor", torch.zeros(1), persistent=False)
        self.options: EncoderOptions | None = None
        self.default_options: EncoderOptions | None = None

    def set_clip_options(self, options: Mapping[str, Any]) -> None:
        """Nothing to set: the ids are the output, so layer choices (CLIPSetLastLayer) have nothing
        to act on, as in ComfyUI's `HiDreamO1TE`."""

    def reset_clip_options(self) -> None:
        """Nothing to reset (see `set_clip_options`)."""

    @contextmanager
    def using_options(self, options: Any) -> Iterator[None]:
        yield

    def encode_token_weights(self, token_weight_pairs: Any) -> tuple:
        rows = token_weight_pairs[SLOT] if isinstance(token_weight_pairs, Mapping) else token_weight_pairs
        ids = torch.tensor([[int(pair[0]) for pair in rows[0]]], dtype=torch.long)
        return ids[..., None].float(), None, {"text_input_ids": ids}

    def load_sd(self, sd: Mapping[str, Any]) -> list:
        return []


class HiDreamO1TEModel(TextEncoderSet):
    """ComfyUI's CLIP model of HiDream-O1: the one pass-through tower's output."""

    clip_name, clip = SLOT, SLOT

    def encode_token_weights(self, tokens: Mapping[str, Any], layer_idx: int | None = None,
                             projected_pooled: bool = True) -> tuple:
        if SLOT not in tokens:
            raise TokenizeError(f"tokens for HiDream-O1 lack key {SLOT!r}; got keys {sorted(tokens)}")
        return self.encoder(SLOT).encode_token_weights(tokens[SLOT])


HIDREAM_O1_TEXT_ENCODERS = EncoderSetSpec(
    "hidream_o1", (EncoderOptions(SLOT, SLOT, PAD_ID, None, False, projected_pooled=False, kind="qwen3vl",
                                  nominal_width=1, min_length=1),),
    SLOT, set_class=HiDreamO1TEModel, tokenizer_class=HiDreamO1Tokenizer)


def tokenizer_only_clip(load_device: Any = None, offload_device: Any = None) -> Any:
    """The checkpoint's CLIP: the tokenizer and the pass-through tower (nothing read from files)."""
    from comfy_core.text_encoders.clip import CLIP
    from comfy_core.text_encoders.qwen_tokenizer import QwenTokenizer

    module = TextEncoderSet(HIDREAM_O1_TEXT_ENCODERS, {SLOT: HiDreamO1TE()})
    tokenizer = HiDreamO1Tokenizer({SLOT: QwenTokenizer(SLOT, WIDTH, min_length=1, pad_token=PAD_ID)})
    return CLIP.from_encoders(module, tokenizer, load_device, offload_device)


__all__ = ["HIDREAM_O1_TEXT_ENCODERS", "HiDreamO1TE", "HiDreamO1TEModel", "HiDreamO1Tokenizer", "tokenizer_only_clip"]
