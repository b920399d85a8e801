"""Z-Image's text-encoder set (ComfyUI's `comfy/text_encoders/z_image.py`): the one Qwen3-4B tower
`qwen3_4b` (`qwen3.Qwen3TextEncoder`), loaded by CLIPLoader type "lumina2" (ComfyUI builds Z-Image's
encoder for a Qwen3-4B file under any type but flux / flux2; the official Z-Image templates use
"lumina2", the Qwen3 text-generation template "ltxv"), with ComfyUI's class names for the set and its tokenizer (`ZImageTEModel`,
`ZImageTokenizer`).

The prompt is wrapped in Qwen's chat template as a user turn with the assistant turn opened,
`<|im_start|>user\\n{prompt}<|im_end|>\\n<|im_start|>assistant\\n` (a `llama_template` keyword
replaces it, `{}` marking the prompt), and tokenized with prompt weights disabled. The conditioning
is the state after the next-to-last block for every token, template tokens included, without the
final norm, `[1, T, 2560]`, with `{"pooled_output": None, "attention_mask": [1, T]}` (all ones
unless the text holds `<|endoftext|>`).

The set lives here until a Z-Image family package declares it as its `text_encoders`; the
registry lists it as an encoder set without a family meanwhile (`FamilyRegistry.register_encoder_set`).
"""
from __future__ import annotations

from typing import Any

from comfy_core.text_encoders.encoder_set import EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.qwen3 import QWEN3_4B_SLOT
from comfy_core.text_encoders.qwen_tokenizer import PAD_ID
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer

QWEN3_4B_WIDTH = 2560
LLAMA_TEMPLATE = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"


class ZImageTEModel(TextEncoderSet):
    """Z-Image's text-encoder set (ComfyUI's `ZImageTEModel`, an SD1ClipModel named `qwen3_4b`:
    its tower is the child `qwen3_4b`)."""

    clip_name, clip = QWEN3_4B_SLOT, QWEN3_4B_SLOT


class ZImageTokenizer(FamilyTokenizer):
    """Z-Image's tokenizer (ComfyUI's `ZImageTokenizer`: an SD1Tokenizer named `qwen3_4b`, tokens
    under key "qwen3_4b"): the prompt in the chat template (`llama_template`), weights disabled."""

    clip_name, clip = QWEN3_4B_SLOT, QWEN3_4B_SLOT
    llama_template = LLAMA_TEMPLATE

    def tokenize_with_weights(self, text: str, return_word_ids: bool = False, llama_template: str | None = None,
                              **kwargs: Any) -> dict[str, list]:
        template = self.llama_template if llama_template is None else llama_template
        kwargs["disable_weights"] = True
        return super().tokenize_with_weights(template.format(text), return_word_ids, **kwargs)

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        return getattr(self, QWEN3_4B_SLOT).decode(token_ids, skip_special_tokens=skip_special_tokens)


ZIMAGE_TEXT_ENCODERS = EncoderSetSpec(
    "zimage", (EncoderOptions(QWEN3_4B_SLOT, QWEN3_4B_SLOT, PAD_ID, -2, False, projected_pooled=False,
                              prefixes=(f"text_encoders.{QWEN3_4B_SLOT}.transformer.",), kind="qwen3",
                              nominal_width=QWEN3_4B_WIDTH, min_length=1),),
    QWEN3_4B_SLOT, set_class=ZImageTEModel, tokenizer_class=ZImageTokenizer, clip_types=("lumina2", "ltxv"))
