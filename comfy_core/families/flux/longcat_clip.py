"""LongCat-Image's text-encoder set (ComfyUI's `comfy/text_encoders/longcat_image.py`): the one
Qwen2.5-VL-7B tower `qwen25_7b` that Qwen-Image loads too (`comfy_core.text_encoders.qwen25vl`,
the same files), loaded by CLIPLoader type "longcat_image", with ComfyUI's class names for the set
and its tokenizer (`LongCatImageTEModel`, `LongCatImageTokenizer`).

Tokenizing (ComfyUI's `LongCatImageTokenizer`; diffusers' `LongCatImagePipeline._encode_prompt`):

- the prompt is split at quotations (`'...'`, `"..."`, `‘...’`, `“...”`; an apostrophe inside a
  word such as "don't" is no quotation), and each quoted part (its marks included) is tokenized one
  character at a time -- LongCat's character-level encoding of text to render; the rest normally;
- the prompt's tokens are cut to 512 and padded with `<|endoftext|>` (151643) to 512;
- around them the chat template: a system turn ("As an image captioning expert, ..."), the user
  turn opened, and after the prompt the user turn closed and the assistant turn opened; given
  images (LongCat-Image-Edit through TextEncodeQwenImageEdit), the edit system turn ("As an image
  editing expert, ...") and one `<|vision_start|><|image_pad|><|vision_end|>` block at the start of
  the user turn, the pad token replaced by ComfyUI's image entry (`{"type": "image", "data": IMAGE,
  ...}`), which the tower expands into its vision tower's tokens (ComfyUI gives the first image
  only a block);
- an empty prompt is one space; a prompt starting with `<|im_start|>` (or `skip_template`) gets
  no template (its tokens still split at quotations, cut and padded to 512) and no image entry;
  prompt weights are off.

Encoding (ComfyUI's `LongCatImageTEModel.encode_token_weights`): the tower's final normed states
(layer "last"), the token mask covering the text up to the first pad (ComfyUI's SDClipModel mask:
the pads and the closing template after them are masked as keys); then the system turn is cut off
(the output starts after the second `<|im_start|>` and its `user\\n`), and the suffix from the last
`<|im_end|>` on. What is left: for text-to-image the 512 prompt positions (pads included, as
diffusers' pipeline keeps them); for the edit, the image's vision block first. No pooled output;
the attention mask is cut the same way and kept only when it masks something (the network ignores
it: ComfyUI's Flux attends to every text position, as diffusers' transformer does).
"""
from __future__ import annotations

import re
from typing import Any, Mapping

from comfy_core.families.qwen_image.clip import NEWLINE_ID, QWEN25_7B_WIDTH, USER_ID, find_template_end
from comfy_core.text_encoders.chat_tokenizer import IMAGE_PAD_ID, is_token_id, prompt_images
from comfy_core.text_encoders.encoder_set import EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.qwen25vl import QWEN25_7B_SLOT
from comfy_core.text_encoders.qwen_tokenizer import PAD_ID
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer

IM_END_ID = 151645  # <|im_end|>
MAX_PROMPT_TOKENS = 512
T2I_PREFIX = ("<|im_start|>system\nAs an image captioning expert, generate a descriptive text prompt based on an "
              "image content, suitable for input to a text-to-image model.<|im_end|>\n<|im_start|>user\n")
EDIT_PREFIX = ("<|im_start|>system\nAs an image editing expert, first analyze the content and attributes of the "
               "input image(s). Then, based on the user's editing instructions, clearly and precisely determine how "
               "to modify the given image(s), ensuring that only the specified parts are altered and all other "
               "aspects remain consistent with the original(s).<|im_end|>\n<|im_start|>user\n"
               "<|vision_start|><|image_pad|><|vision_end|>")
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n"
QUOTE_PAIRS = (("'", "'"), ('"', '"'), ("\u2018", "\u2019"), ("\u201c", "\u201d"))
QUOTED = "|".join(re.escape(a) + "[^" + re.escape(a + b) + "]*?" + re.escape(b) for a, b in QUOTE_PAIRS)
WORD_APOSTROPHE = re.compile(r"[a-zA-Z]+'[a-zA-Z]+")


def split_quotation(prompt: str) -> list[tuple[str, bool]]:
    """The prompt in parts, each `(text, quoted)`, in order (LongCat's `split_quotation`): words
    with an inner apostrophe are hidden behind placeholders while splitting at the quote pairs.

    The placeholders are restored longest first: LongCat's (and ComfyUI's) restore the shortest
    first, which turns a second distinct word ("it's Tom's") into copies of the first, in an order
    that follows Python's string hashing; here every word comes back as written."""
    hidden = []
    for i, word in enumerate(dict.fromkeys(WORD_APOSTROPHE.findall(prompt))):
        placeholder = "longcat_$##$_longcat" * (i + 1)
        prompt = prompt.replace(word, placeholder)
        hidden.append((word, placeholder))
    parts = []
    for part in re.split(f"({QUOTED})", prompt):
        for word, placeholder in reversed(hidden):
            part = part.replace(placeholder, word)
        if part:
            parts.append((part, bool(re.match(QUOTED, part))))
    return parts


class LongCatImageTokenizer(FamilyTokenizer):
    """LongCat-Image's tokenizer (ComfyUI's `LongCatImageTokenizer`: an SD1Tokenizer named
    `qwen25_7b`, tokens under "qwen25_7b"); see the module doc."""

    T2I_PREFIX, EDIT_PREFIX, SUFFIX = T2I_PREFIX, EDIT_PREFIX, SUFFIX

    def prompt_ids(self, text: str) -> list[int]:
        """The prompt's ids: quoted parts character by character, cut to 512 (not padded)."""
        base = getattr(self, QWEN25_7B_SLOT)
        ids: list[int] = []
        for part, quoted in split_quotation(text):
            if quoted:
                for char in part:
                    ids.extend(base.encode(char))
            else:
                ids.extend(base.encode(part))
        return ids[:MAX_PROMPT_TOKENS]

    def tokenize_with_weights(self, text: str, return_word_ids: bool = False, images: Any = None,
                              skip_template: bool = False, image: Any = None, **kwargs: Any) -> dict[str, list]:
        images = prompt_images(images, image)
        skip_template = skip_template or text.startswith("<|im_start|>") or text.startswith("<|start_header_id|>")
        if text == "":
            text = " "
        base = getattr(self, QWEN25_7B_SLOT)
        prompt = self.prompt_ids(text)
        prompt += [PAD_ID] * (MAX_PROMPT_TOKENS - len(prompt))
        if skip_template:  # the text as it is (ComfyUI's base tokenizer: quotes split, padded to 512)
            ids = prompt
        else:
            ids = base.encode(self.EDIT_PREFIX if images else self.T2I_PREFIX) + prompt + base.encode(self.SUFFIX)
        pairs: list[tuple] = [(t, 1.0, 0) if return_word_ids else (t, 1.0) for t in ids]
        used = len(images) if skip_template else 0
        for index, pair in enumerate(pairs):
            if used < len(images) and is_token_id(pair[0], IMAGE_PAD_ID):
                pairs[index] = ({"type": "image", "data": images[used], "original_type": "image"},) + tuple(pair[1:])
                used += 1
        return {QWEN25_7B_SLOT: [pairs]}

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        return getattr(self, QWEN25_7B_SLOT).decode(token_ids, skip_special_tokens=skip_special_tokens)


def conditioning_span(pairs: list[tuple], length: int, template_end: int = -1) -> tuple[int, int]:
    """`(start, cut)` of the conditioning in a chunk of `length` states (ComfyUI's
    `LongCatImageTEModel.encode_token_weights`): it starts at the second `<|im_start|>`, moved past
    a following `user\\n` (0 when there is none); `cut` states are dropped from the end: the tokens
    from the last `<|im_end|>` on (0 when there is none, or when that would leave nothing)."""
    end = find_template_end(pairs) if template_end == -1 else template_end
    if length > end + 3 and is_token_id(pairs[end + 1][0], USER_ID) and is_token_id(pairs[end + 2][0], NEWLINE_ID):
        end += 3
    end = max(end, 0)
    cut = 0
    for index in range(len(pairs) - 1, -1, -1):
        if is_token_id(pairs[index][0], IM_END_ID):
            cut = len(pairs) - index
            break
    if cut and length - end <= cut:
        cut = 0
    return end, cut


class LongCatImageTEModel(TextEncoderSet):
    """LongCat-Image's set (ComfyUI's `LongCatImageTEModel`, an SD1ClipModel named `qwen25_7b`): the
    tower's final states with the template cut off (see the module doc)."""

    clip_name, clip = QWEN25_7B_SLOT, QWEN25_7B_SLOT

    def encode_token_weights(self, tokens: Mapping[str, Any], layer_idx: int | None = None,
                             projected_pooled: bool = True, template_end: int = -1) -> tuple:
        cond, pooled, *rest = super().encode_token_weights(tokens, layer_idx=layer_idx,
                                                           projected_pooled=projected_pooled)
        extra = dict(rest[0]) if rest else {}
        pairs = list(tokens[QWEN25_7B_SLOT][0])
        # Token indices cut the states as ComfyUI cuts them: the edit's image entry (which expands
        # into its vision tokens) comes after the start, and the cut counts from the end.
        start, cut = conditioning_span(pairs, cond.shape[1], template_end)
        stop = cond.shape[1] - cut
        cond = cond[:, start:stop]
        if "attention_mask" in extra:
            mask = extra["attention_mask"][:, start:stop]
            if int(mask.sum()) == mask.numel():
                del extra["attention_mask"]  # it masks nothing (ComfyUI leaves it out)
            else:
                extra["attention_mask"] = mask
        return cond, pooled, extra


LONGCAT_TEXT_ENCODERS = EncoderSetSpec(
    "longcat_image", (EncoderOptions(QWEN25_7B_SLOT, QWEN25_7B_SLOT, PAD_ID, None, False, projected_pooled=False,
                                     prefixes=(f"text_encoders.{QWEN25_7B_SLOT}.transformer.",), kind="qwen25vl",
                                     nominal_width=QWEN25_7B_WIDTH, min_length=1),),
    QWEN25_7B_SLOT, set_class=LongCatImageTEModel, tokenizer_class=LongCatImageTokenizer,
    clip_types=("longcat_image",))

__all__ = ["LONGCAT_TEXT_ENCODERS", "LongCatImageTEModel", "LongCatImageTokenizer",
           "conditioning_span", "split_quotation"]
