"""The chat-template tokenizer of the Qwen-VL text towers, once (ComfyUI's `Qwen3VLTokenizer`
shape, which its Krea 2, Mage-Flow, Fibo 2.0, JoyImage, Boogu and Qwen-Image 2.1 tokenizers keep).

`tokenize_with_weights(text, llama_template=None, images=(), image=None, prevent_empty_text=False,
thinking=True, skip_template=False)`:

- the images are `images`, else each picture of an `image` batch (TextGenerate's input);
- a text starting with `<|im_start|>` (or `skip_template`) is taken as it is; otherwise it goes into
  `llama_template` when one is given (TextEncodeQwenImageEditPlus and packs give theirs), else into
  the family's template for that many images (`prompt_template`: by default the family's
  `llama_template` with one `<|vision_start|><|image_pad|><|vision_end|>` block per image before
  the prompt);
- `thinking` false appends Qwen3's empty think block (`think_block`; None: the family never does);
- TextGenerate's `system_prompt` opens the prompt as a system turn where the family's tokenizer
  takes one (`system_turn`), and is ignored elsewhere, as ComfyUI's Qwen3-VL tokenizer ignores it;
- prompt weights are off (`disable_weights`), and each `<|image_pad|>` in order becomes an image
  entry (`{"type": "image", "data": IMAGE[1, H, W, C], "original_type": "image"}`) that the tower's
  vision encoder replaces with its tokens.

A family subclasses `ChatTemplateTokenizer` with its template (or `prompt_template`), its error
class and the options its ComfyUI tokenizer ignores; `prompt_images` and `splice_image_pads` serve
the tokenizers whose prompt is built otherwise (Qwen-Image's, LongCat-Image's).
"""
from __future__ import annotations

import numbers
from typing import Any, Mapping, Sequence

from comfy_core.text_encoders.errors import TokenizeError
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer

VISION_BLOCK = "<|vision_start|><|image_pad|><|vision_end|>"  # one per image
THINK_BLOCK = "<think>\n\n</think>\n\n"  # Qwen3's empty thinking block (`thinking` false)
IMAGE_PAD_ID = 151655  # `<|image_pad|>` in the Qwen2.5 / Qwen3 vocabularies


def is_token_id(token: Any, value: int) -> bool:
    """A plain token id equal to `value` (not an embedding entry, a tensor or a bool)."""
    return isinstance(token, numbers.Integral) and not isinstance(token, bool) and token == value


def prompt_images(images: Sequence[Any] | None, image: Any = None) -> list[Any]:
    """The prompt's pictures: `images`, else each picture of the `image` batch [B, H, W, C]."""
    listed = list(images or ())
    if image is not None and not listed:
        listed = [image[index:index + 1] for index in range(image.shape[0])]
    return listed


def with_vision_blocks(template: str, count: int) -> str:
    """`template` with one vision block per image just before the prompt's `{}`."""
    return template.replace("{}", VISION_BLOCK * count + "{}", 1) if count else template


def splice_image_pads(tokens: Mapping[str, Any], images: Sequence[Any], pad_id: int = IMAGE_PAD_ID) -> int:
    """Each `<|image_pad|>` of every token list, in order, becomes the next image's entry (in place);
    pads past the images stay ids. Returns how many images were placed."""
    used = 0
    for chunks in tokens.values():
        if not isinstance(chunks, list):
            continue  # a flag a family keeps beside its tokens (Qwen-Image 2.1's keep_vision)
        for chunk in chunks:
            for index, pair in enumerate(chunk):
                if used < len(images) and is_token_id(pair[0], pad_id):
                    chunk[index] = ({"type": "image", "data": images[used], "original_type": "image"},) + tuple(pair[1:])
                    used += 1
    return used


class ChatTemplateTokenizer(FamilyTokenizer):
    """A Qwen-VL tower's chat-template tokenizer (module doc). Subclasses set `llama_template` or
    override `prompt_template`, `media_label` / `prompt_error` for the refusal of video or audio, and
    `think_block` / `system_turn` where the family's tokenizer differs."""

    llama_template = ""
    think_block: str | None = THINK_BLOCK
    media_label = "this text encoder"
    prompt_error: type[Exception] = TokenizeError
    system_turn = False

    def prompt_template(self, images: int, text: str) -> str:
        """The family's template for a prompt with `images` pictures (`text`: the prompt, for the
        families whose template depends on it)."""
        return with_vision_blocks(self.llama_template, images)

    def tokenize_with_weights(self, text: str, return_word_ids: bool = False, llama_template: str | None = None,
                              images: Any = (), image: Any = None, prevent_empty_text: bool = False,
                              thinking: bool = True, skip_template: bool = False, **kwargs: Any) -> dict[str, Any]:
        system_prompt = kwargs.pop("system_prompt", "") or ""
        if kwargs.pop("video", None) is not None or kwargs.pop("audio", None) is not None:
            raise self.prompt_error(f"{self.media_label} takes text and images only, not video or audio")
        images = prompt_images(images, image)
        if prevent_empty_text and text == "":
            text = " "
        if skip_template or text.startswith("<|im_start|>"):
            prompt = text
        else:
            template = self.prompt_template(len(images), text) if llama_template is None else llama_template
            prompt = template.format(text)
            if system_prompt and self.system_turn:
                prompt = f"<|im_start|>system\n{system_prompt}<|im_end|>\n{prompt}"
            if not thinking and self.think_block is not None:
                prompt += self.think_block
        kwargs["disable_weights"] = True
        tokens = dict(super().tokenize_with_weights(prompt, return_word_ids, **kwargs))
        splice_image_pads(tokens, images)
        return tokens


__all__ = ["IMAGE_PAD_ID", "THINK_BLOCK", "VISION_BLOCK", "ChatTemplateTokenizer", "is_token_id", "prompt_images",
           "splice_image_pads", "with_vision_blocks"]
