"""NewBie-Image's text-encoder set (ComfyUI's `comfy/text_encoders/newbie.py`): Gemma 3 4B's token
states as the context and Jina CLIP v2's mean-pooled text embedding as the pooled output, loaded by
DualCLIPLoader type "newbie" from the two files (`gemma_3_4b_it_bf16`, `jina_clip_v2_bf16`), with
ComfyUI's class names for the set and its tokenizer (`NewBieClipModel`, `NewBieTokenizer`).

- `gemma3_4b` (ComfyUI's `Gemma3_4BModel`): the state after the next-to-last block, without the
  final norm, for every token (`<bos>` first, no end token), with the attention mask;
- `jina_clip_2` (ComfyUI's `JinaClip2TextModel`, comfy_core/text_encoders/jina_clip2.py): `<s>`
  prompt `</s>`, its mean over the unmasked tokens of the last block as `pooled_output`;
- combined as ComfyUI's `NewBieClipModel.encode_token_weights`: Gemma's states and extra
  (`attention_mask`), Jina's pooled vector; Jina's states are dropped.
"""
from __future__ import annotations

from typing import Mapping

import torch

from comfy_core.text_encoders.encoder_set import CombineRule, EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer

GEMMA3_4B_SLOT = "gemma3_4b"
GEMMA3_4B_WIDTH = 2560
JINA_SLOT = "jina_clip_2"
JINA_WIDTH = 1024


class NewBieClipModel(TextEncoderSet):
    """NewBie's text-encoder set (ComfyUI's `NewBieClipModel`: children `gemma` and `jina`; here the
    towers are the children `gemma3_4b` and `jina_clip_2`)."""


class NewBieTokenizer(FamilyTokenizer):
    """NewBie's tokenizer (ComfyUI's `NewBieTokenizer`: tokens under "gemma" and "jina")."""


class NewBieCombine(CombineRule):
    """Gemma's states as the conditioning, Jina's pooled output as `pooled_output`."""

    def __call__(self, spec: EncoderSetSpec, outputs: Mapping[str, torch.Tensor],
                 pooled: Mapping[str, torch.Tensor | None]) -> tuple[torch.Tensor, torch.Tensor | None]:
        return outputs[GEMMA3_4B_SLOT], pooled.get(JINA_SLOT)


NEWBIE_TEXT_ENCODERS = EncoderSetSpec(
    "newbie", (EncoderOptions(GEMMA3_4B_SLOT, "gemma", 0, -2, False, projected_pooled=False, kind="gemma3",
                              nominal_width=GEMMA3_4B_WIDTH, min_length=1),
               EncoderOptions(JINA_SLOT, "jina", 1, None, False, projected_pooled=False, kind="jina_clip_2",
                              nominal_width=JINA_WIDTH, min_length=1)),
    JINA_SLOT, combine=NewBieCombine(), set_class=NewBieClipModel, tokenizer_class=NewBieTokenizer, clip_types=("newbie",))
