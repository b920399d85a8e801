"""OmniGen2's text-encoder set (ComfyUI's `comfy/text_encoders/omnigen2.py`): the one Qwen2.5-VL-3B
language model `qwen25_3b` (`comfy_core.text_encoders.qwen25vl.Qwen25VLTextEncoder`, which reads the
3B shapes from the weights: 2048 wide, 16 query heads sharing 2 key/value heads of 128), loaded by
CLIPLoader type "omnigen2", with ComfyUI's class names for the set and its tokenizer
(`Omnigen2Model`, `Omnigen2Tokenizer`).

Tokenizing (ComfyUI's `Omnigen2Tokenizer.tokenize_with_weights`): the prompt goes into OmniGen2's
chat template, a system turn ("You are a helpful assistant that generates high-quality images
based on user instructions.") and the user turn, closed, with no assistant turn opened
(`LLAMA_TEMPLATE`; a `llama_template` keyword replaces it, `{}` marking the prompt); the Qwen
tokenizer with no start / end tokens, no padding, pad token 151643. Prompt weights apply as in any
SD1-style tokenizer (ComfyUI leaves them enabled here).

Encoding (ComfyUI's `Qwen25_3BModel`, an SDClipModel): the final normed states (layer "last") of
every token, template included, `[1, T, 2048]`, with `{"attention_mask": [1, T]}`; no pooled output.
"""
from __future__ import annotations

from typing import Any

from comfy_core.text_encoders.encoder_set import EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.qwen_tokenizer import PAD_ID
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer

QWEN25_3B_SLOT = "qwen25_3b"
QWEN25_3B_WIDTH = 2048
LLAMA_TEMPLATE = ("<|im_start|>system\nYou are a helpful assistant that generates high-quality images based on "
                  "user instructions.<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n")


class Omnigen2Model(TextEncoderSet):
    """OmniGen2's text-encoder set (ComfyUI's `Omnigen2Model`, an SD1ClipModel named `qwen25_3b`:
    its tower is the child `qwen25_3b`)."""

    clip_name, clip = QWEN25_3B_SLOT, QWEN25_3B_SLOT


class Omnigen2Tokenizer(FamilyTokenizer):
    """OmniGen2's tokenizer (ComfyUI's `Omnigen2Tokenizer`: an SD1Tokenizer named `qwen25_3b`, tokens
    under key "qwen25_3b"): the prompt in the chat template (`llama_template`)."""

    clip_name, clip = QWEN25_3B_SLOT, QWEN25_3B_SLOT
    llama_template = LLAMA_TEMPLATE

    def tokenize_with_weights(self, text: str, return_word_ids: bool = False, llama_template: str | None = None,
                              **kwargs: Any) -> dict[str, list]:
        template = self.llama_template if llama_template is None else llama_template
        return super().tokenize_with_weights(template.format(text), return_word_ids, **kwargs)

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        return getattr(self, QWEN25_3B_SLOT).decode(token_ids, skip_special_tokens=skip_special_tokens)


OMNIGEN2_TEXT_ENCODERS = EncoderSetSpec(
    "omnigen2", (EncoderOptions(QWEN25_3B_SLOT, QWEN25_3B_SLOT, PAD_ID, None, False, projected_pooled=False,
                                prefixes=(f"text_encoders.{QWEN25_3B_SLOT}.transformer.",), kind="qwen25vl",
                                nominal_width=QWEN25_3B_WIDTH, min_length=1),),
    QWEN25_3B_SLOT, set_class=Omnigen2Model, tokenizer_class=Omnigen2Tokenizer, clip_types=("omnigen2",))
