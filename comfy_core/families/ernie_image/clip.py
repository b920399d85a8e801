"""ERNIE-Image's text-encoder set (ComfyUI's `comfy/text_encoders/ernie.py`: `ErnieTokenizer`,
`Ministral3_3BModel`, `ErnieTEModel`): one Ministral 3 3B tower `ministral3_3b`
(`comfy_core.text_encoders.mistral.MinistralTextEncoder`), loaded by CLIPLoader (the official
templates use type "flux2"; ComfyUI builds this set for a 3072-wide Llama-shaped file whatever the
type, we answer "flux2" and "stable_diffusion"). Its tokenizer is the file's tekken data.

Tokenizing (ComfyUI's `ErnieTokenizer` over `Mistral3Tokenizer`): no template around the prompt (a
`llama_template` keyword is ignored, as ComfyUI's), `<s>` (1) in front, prompt weights disabled, no
end token, padded on the left with `<pad>` (11) to `min_length` 1. The prompt enhancer's chat
(`<s>[SYSTEM_PROMPT]...[INST]...[/INST]`) is written into the prompt text by the template itself.

Encoding (ComfyUI's `Ministral3_3BModel`: layer "hidden", `layer_idx` -2, no norm on it, attention
masks used and returned): the output of the next-to-last block for every token, `[1, T, 3072]`,
with `{"attention_mask": [1, T]}`; no pooled output. The ERNIE-Image network reads the states as its
context (`model_base.ErnieImage`: `c_crossattn` only).

The same file type also generates text (ComfyUI's `Ministral3_3B` is a `BaseGenerate`): the
prompt-enhancer file (`ernie-image-prompt-enhancer.safetensors`, a Ministral 3 3B) into
`TextGenerate` (stop token `</s>`, the tied head); `decode` is the tekken tokenizer's.
"""
from __future__ import annotations

from typing import Any

from comfy_core.text_encoders.encoder_set import EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.mistral import MINISTRAL_SLOT, MINISTRAL_WIDTH
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer
from comfy_core.text_encoders.tekken_tokenizer import MISTRAL_PAD_ID

ERNIE_LAYER = -2


class ErnieTEModel(TextEncoderSet):
    """ComfyUI's `ErnieTEModel` (an SD1ClipModel named `ministral3_3b`)."""

    clip_name, clip = MINISTRAL_SLOT, MINISTRAL_SLOT


class ErnieTokenizer(FamilyTokenizer):
    """ComfyUI's `ErnieTokenizer` (tokens under "ministral3_3b"): the prompt as it is, weights off."""

    clip_name, clip = MINISTRAL_SLOT, MINISTRAL_SLOT

    def tokenize_with_weights(self, text: str, return_word_ids: bool = False, llama_template: str | None = None,
                              **kwargs: Any) -> dict[str, list]:
        kwargs["disable_weights"] = True
        return super().tokenize_with_weights(text, return_word_ids, **kwargs)

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        return getattr(self, MINISTRAL_SLOT).decode(token_ids, skip_special_tokens=skip_special_tokens)


ERNIE_TEXT_ENCODERS = EncoderSetSpec(
    "ernie_image", (EncoderOptions(MINISTRAL_SLOT, MINISTRAL_SLOT, MISTRAL_PAD_ID, ERNIE_LAYER, False,
                                   projected_pooled=False, prefixes=(f"text_encoders.{MINISTRAL_SLOT}.transformer.",),
                                   kind="mistral", nominal_width=MINISTRAL_WIDTH, min_length=1),),
    MINISTRAL_SLOT, set_class=ErnieTEModel, tokenizer_class=ErnieTokenizer, clip_types=("flux2", "stable_diffusion"))
