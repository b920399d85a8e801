"""Ovis-Image's text-encoder set: Ovis 2.5's language model, a Qwen3-2B (`qwen3_2b`,
`comfy_core.text_encoders.qwen3.Qwen3TextEncoder`, 2048 wide), loaded by CLIPLoader type "ovis",
with ComfyUI's class names for the set and its tokenizer (`OvisTEModel`, `OvisTokenizer`).

What the set computes is diffusers' `OvisImagePipeline._get_ovis_prompt_embeds` (the reference
implementation of AIDC-AI's Ovis-Image), in ComfyUI's shape:

- the prompt goes into Qwen3's chat template as one user turn that starts with Ovis-Image's
  instruction ("Describe the image by detailing the color, quantity, text, shape, size, texture,
  spatial relationships of the objects and background: "), the assistant turn opened with an empty
  think block (`enable_thinking=False`); a `llama_template` keyword replaces it, `{}` marking the
  prompt;
- tokenized with the Qwen tokenizer, no start / end tokens, padded with 151643 to at least 284
  tokens (the pipeline's 256 + the 28 template tokens it drops);
- the final normed states (layer "last") of every token, the pads masked out of attention and
  their states zeroed;
- the template's head cut off: everything before the ":" that follows the first " background"
  (ids 4004, 25) -- the pipeline's first 28 tokens, the ":" kept as the pipeline keeps it;
- no pooled output and no attention mask in the conditioning (the network attends to the zeroed
  pads, as the pipeline's transformer does).

Not confirmed from ComfyUI's own `comfy/text_encoders/ovis.py` (not in the code index): whether it
keeps prompt weights (here disabled, as its other Qwen chat-template encoders do) and its exact cut
(here the pipeline's, which a third-party port of ComfyUI's file also names: marker 4004 then 25,
284 tokens minimum, masked states zeroed).

Reduced-width test towers are named `qwen3_4b` by the Qwen3 detection (any width but ComfyUI's
four); the set takes either slot, the 2B being the released one.
"""
from __future__ import annotations

import numbers
from typing import Any, Mapping

import torch

from comfy_core.text_encoders.encoder_set import CombineRule, EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.qwen3 import QWEN3_4B_SLOT
from comfy_core.text_encoders.qwen_tokenizer import PAD_ID
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer

QWEN3_2B_SLOT = "qwen3_2b"
QWEN3_2B_WIDTH = 2048
OVIS_MIN_LENGTH = 284
BACKGROUND_ID = 4004  # " background", the last word of the instruction
COLON_ID = 25  # ":"
LLAMA_TEMPLATE = ("<|im_start|>user\nDescribe the image by detailing the color, quantity, text, shape, size, "
                  "texture, spatial relationships of the objects and background: {}<|im_end|>\n"
                  "<|im_start|>assistant\n<think>\n\n</think>\n\n")


class OvisTokenizer(FamilyTokenizer):
    """Ovis-Image's tokenizer (ComfyUI's `OvisTokenizer`, tokens under the tower's slot name): the
    prompt in the template (`llama_template`), weights disabled, at least 284 tokens."""

    llama_template = LLAMA_TEMPLATE

    def tokenize_with_weights(self, text: str, return_word_ids: bool = False, llama_template: str | None = None,
                              **kwargs: Any) -> dict[str, list]:
        template = self.llama_template if llama_template is None else llama_template
        kwargs["disable_weights"] = True
        return super().tokenize_with_weights(template.format(text), return_word_ids, **kwargs)


def _is_id(token: Any, value: int) -> bool:
    return not isinstance(token, (torch.Tensor, dict)) and isinstance(token, numbers.Integral) and token == value


def template_end(pairs: list[tuple]) -> int:
    """Where the conditioning starts in the first chunk: the index of the first " background" token,
    moved onto the ":" that follows it; 0 when there is no such token (a custom template)."""
    for index, pair in enumerate(pairs):
        if _is_id(pair[0], BACKGROUND_ID):
            if index + 1 < len(pairs) and _is_id(pairs[index + 1][0], COLON_ID):
                return index + 1
            return index
    return 0


class OvisTEModel(TextEncoderSet):
    """Ovis-Image's set (ComfyUI's `OvisTEModel`): the tower's final states, pads zeroed, the template
    head cut off (see the module doc)."""

    def encode_token_weights(self, tokens: Mapping[str, Any], layer_idx: int | None = None,
                             projected_pooled: bool = True) -> tuple:
        cond, pooled, *rest = super().encode_token_weights(tokens, layer_idx=layer_idx,
                                                           projected_pooled=projected_pooled)
        extra = dict(rest[0]) if rest else {}
        mask = extra.pop("attention_mask", None)
        if mask is not None:
            cond = cond * mask.to(device=cond.device, dtype=cond.dtype).reshape(1, -1, 1)  # [1, T, W]
        (slot,) = [s for s in self.slots]
        pairs = list(tokens[self.spec.options(slot).token_key][0])
        return cond[:, template_end(pairs):], None, extra


class OneTower(CombineRule):
    """The set holds one of its slots' towers: the conditioning is that tower's (no pooled output)."""

    def __call__(self, spec: EncoderSetSpec, outputs: Mapping[str, torch.Tensor],
                 pooled: Mapping[str, torch.Tensor | None]) -> tuple[torch.Tensor, torch.Tensor | None]:
        if len(outputs) != 1:
            raise ValueError(f"encoder set {spec.name}: expected one tower's output, got {sorted(outputs)}")
        (cond,) = outputs.values()
        return cond, None


def _options(slot: str, width: int) -> EncoderOptions:
    return EncoderOptions(slot, slot, PAD_ID, None, True, projected_pooled=False,
                          prefixes=(f"text_encoders.{slot}.transformer.",), kind="qwen3", nominal_width=width,
                          min_length=OVIS_MIN_LENGTH)


OVIS_TEXT_ENCODERS = EncoderSetSpec(
    "ovis", (_options(QWEN3_2B_SLOT, QWEN3_2B_WIDTH), _options(QWEN3_4B_SLOT, 2560)), QWEN3_2B_SLOT,
    combine=OneTower(), set_class=OvisTEModel, tokenizer_class=OvisTokenizer, clip_types=("ovis",), partial=True)
