"""Qwen-Image's text-encoder set (ComfyUI's `comfy/text_encoders/qwen_image.py`): the one
Qwen2.5-VL-7B tower `qwen25_7b` (`comfy_core.text_encoders.qwen25vl.Qwen25VLTextEncoder`), loaded by
CLIPLoader type "qwen_image", with ComfyUI's class names for the set and its tokenizer
(`QwenImageTEModel`, `QwenImageTokenizer`).

Tokenizing (ComfyUI's `QwenImageTokenizer.tokenize_with_weights`): the prompt goes into Qwen-Image's
chat template, a system turn asking to describe the image, then the user turn and the opened
assistant turn (`LLAMA_TEMPLATE`); with input images (Qwen-Image-Edit), the edit system prompt and
one `<|vision_start|><|image_pad|><|vision_end|>` block before the prompt (`LLAMA_TEMPLATE_IMAGES`),
more blocks inserted after the first (or at the start of the user turn) until every image has one.
A `llama_template` keyword replaces the template (`{}` marks the prompt); a prompt that starts with
`<|im_start|>` (or `skip_template`) is used as it is; `thinking` builds a plain user turn with the
optional `system_prompt`. Prompt weights are disabled. Each `<|image_pad|>` token (151655) is then
replaced, in order, by ComfyUI's image embed entry `{"type": "image", "data": IMAGE [1, H, W, 3],
"original_type": "image"}`, which the tower expands into vision-tower embeddings.

Encoding (ComfyUI's `QwenImageTEModel.encode_token_weights`): the tower's final normed states
(layer "last"), then the system-prompt prefix is dropped: the output starts at the second
`<|im_start|>` (151644) of the first chunk, or after it and its `user\\n` (872, 198) when those
follow and the output is longer than that; with no `<|im_start|>` at all only the last position is
kept (ComfyUI's index -1). The attention mask is cut the same way and left out when it masks nothing;
no pooled output.
"""
from __future__ import annotations

from typing import Any, Mapping


from comfy_core.text_encoders.chat_tokenizer import VISION_BLOCK, is_token_id, prompt_images, splice_image_pads
from comfy_core.text_encoders.encoder_set import EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.qwen25vl import QWEN25_7B_SLOT
from comfy_core.text_encoders.qwen_tokenizer import IM_START_ID, PAD_ID
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer

QWEN25_7B_WIDTH = 3584
USER_ID, NEWLINE_ID = 872, 198  # "user", "\n"
USER_TURN = "<|im_start|>user\n"
LLAMA_TEMPLATE = (
    "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, text, "
    "spatial relationships of the objects and background:<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n"
    "<|im_start|>assistant\n")
EDIT_SYSTEM_PROMPT = (
    "Describe the key features of the input image (color, shape, size, texture, objects, background), then "
    "explain how the user's text instruction should alter or modify the image. Generate a new image that meets "
    "the user's requirements while maintaining consistency with the original input where appropriate.")
LLAMA_TEMPLATE_IMAGES = (f"<|im_start|>system\n{EDIT_SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n"
                         f"{VISION_BLOCK}{{}}<|im_end|>\n<|im_start|>assistant\n")


class QwenImagePromptError(ValueError):
    """A Qwen-Image prompt that cannot be tokenized as asked (more image placeholders than images)."""


def ensure_image_placeholders(text: str, image_count: int) -> str:
    """`text` with a vision block for every image (ComfyUI's `_ensure_image_placeholders`): missing
    blocks go after the first vision block, else after the opening of the user turn, else first."""
    placeholders = text.count("<|image_pad|>")
    if placeholders > image_count:
        raise QwenImagePromptError(f"Qwen prompt has {placeholders} image placeholders but {image_count} "
                                   "images were supplied")
    missing = image_count - placeholders
    if missing <= 0:
        return text
    blocks = VISION_BLOCK * missing
    if VISION_BLOCK in text:
        index = text.index(VISION_BLOCK) + len(VISION_BLOCK)
    elif USER_TURN in text:
        index = text.index(USER_TURN) + len(USER_TURN)
    else:
        return blocks + text
    return text[:index] + blocks + text[index:]


class QwenImageTokenizer(FamilyTokenizer):
    """Qwen-Image's tokenizer (ComfyUI's `QwenImageTokenizer`: an SD1Tokenizer named `qwen25_7b`,
    tokens under key "qwen25_7b"); see the module doc."""

    clip_name, clip = QWEN25_7B_SLOT, QWEN25_7B_SLOT
    llama_template = LLAMA_TEMPLATE
    llama_template_images = LLAMA_TEMPLATE_IMAGES

    def tokenize_with_weights(self, text: str, return_word_ids: bool = False, llama_template: str | None = None,
                              images: Any = (), prevent_empty_text: bool = False, thinking: Any = None,
                              skip_template: bool = False, system_prompt: str = "", image: Any = None,
                              **kwargs: Any) -> dict[str, list]:
        if kwargs.get("video") is not None or kwargs.get("audio") is not None:
            raise QwenImagePromptError("Qwen2.5-VL prompts take images only, not video or audio")
        images = prompt_images(images, image)
        skip_template = skip_template or text.startswith("<|im_start|>") or text.startswith("<|start_header_id|>")
        if prevent_empty_text and text == "":
            text = " "
        if skip_template:
            prompt = ensure_image_placeholders(text, len(images))
        elif llama_template is not None:
            prompt = ensure_image_placeholders(llama_template.format(text), len(images))
        elif thinking is not None:
            system = f"<|im_start|>system\n{system_prompt}<|im_end|>\n" if system_prompt else ""
            prompt = f"{system}{USER_TURN}{VISION_BLOCK * len(images)}{text}<|im_end|>\n<|im_start|>assistant\n"
        elif images:
            prompt = ensure_image_placeholders(self.llama_template_images.format(text), len(images))
        else:
            prompt = self.llama_template.format(text)
        kwargs["disable_weights"] = True
        tokens = super().tokenize_with_weights(prompt, return_word_ids, **kwargs)
        splice_image_pads(tokens, images)
        return tokens

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        return getattr(self, QWEN25_7B_SLOT).decode(token_ids, skip_special_tokens=skip_special_tokens)


def find_template_end(pairs: list[tuple]) -> int:
    """Where Qwen-Image's conditioning starts in the first chunk (see the module doc): the index of
    the second `<|im_start|>` (the first when there is one), or -1 when there is none; the caller
    moves past `user\\n` (`QwenImageTEModel.encode_token_weights`)."""
    end, seen = -1, 0
    for index, pair in enumerate(pairs):
        if seen < 2 and is_token_id(pair[0], IM_START_ID):
            end = index
            seen += 1
    return end


class QwenImageTEModel(TextEncoderSet):
    """Qwen-Image's text-encoder set (ComfyUI's `QwenImageTEModel`, an SD1ClipModel named `qwen25_7b`:
    its tower is the child `qwen25_7b`); drops the system prompt (see the module doc)."""

    clip_name, clip = QWEN25_7B_SLOT, QWEN25_7B_SLOT

    def encode_token_weights(self, tokens: Mapping[str, Any], layer_idx: int | None = None,
                             projected_pooled: bool = True, template_end: int = -1) -> tuple:
        cond, pooled, *rest = super().encode_token_weights(tokens, layer_idx=layer_idx,
                                                           projected_pooled=projected_pooled)
        extra = dict(rest[0]) if rest else {}
        pairs = list(tokens[QWEN25_7B_SLOT][0])
        end = template_end
        if end == -1:
            end = find_template_end(pairs)
            if (cond.shape[1] > end + 3 and is_token_id(pairs[end + 1][0], USER_ID)
                    and is_token_id(pairs[end + 2][0], NEWLINE_ID)):
                end += 3
        cond = cond[:, end:]
        if "attention_mask" in extra:
            mask = extra["attention_mask"][:, end:]
            if int(mask.sum()) == mask.numel():
                del extra["attention_mask"]  # it masks nothing (ComfyUI leaves it out)
            else:
                extra["attention_mask"] = mask
        return cond, pooled, extra


QWEN_IMAGE_TEXT_ENCODERS = EncoderSetSpec(
    "qwen_image", (EncoderOptions(QWEN25_7B_SLOT, QWEN25_7B_SLOT, PAD_ID, None, False, projected_pooled=False,
                                  prefixes=(f"text_encoders.{QWEN25_7B_SLOT}.transformer.",), kind="qwen25vl",
                                  nominal_width=QWEN25_7B_WIDTH, min_length=1),),
    QWEN25_7B_SLOT, set_class=QwenImageTEModel, tokenizer_class=QwenImageTokenizer, clip_types=("qwen_image",))
