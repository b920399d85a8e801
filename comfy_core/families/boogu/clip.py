"""Boogu-Image's text-encoder set (ComfyUI's `comfy/text_encoders/boogu.py`: `BooguTokenizer`,
`BooguQwen3VLClipModel`, `BooguTEModel`): one Qwen3-VL 8B tower `qwen3vl_8b`
(`comfy_core.text_encoders.qwen3vl.Qwen3VLTextEncoder`, 4096 wide, its vision tower used for the
edit images), loaded by CLIPLoader type "boogu" from a Qwen3-VL file (the release's
`qwen3vl_8b_fp8_scaled.safetensors`).

Tokenizing (`BooguTokenizer`, tokens under "qwen3vl_8b"; Qwen3-VL's tokenizer rules: no start or end
token, pad `<|endoftext|>` 151643 to `min_length` 1, prompt weights disabled): a chat template with a
system turn and the user turn, closed, no assistant turn and no thinking block:

- a prompt without images: the text-to-image system prompt (`T2I_SYSTEM`);
- a prompt with images: the describe-and-edit system prompt (`DROP_SYSTEM`) and one vision block
  `<|vision_start|><|image_pad|><|vision_end|>` per image before the prompt; each `<|image_pad|>`
  (151655) becomes, in order, ComfyUI's image entry `{"type": "image", "data": IMAGE [1, H, W, C],
  "original_type": "image"}`;
- an empty (or blank) prompt without images: the describe-and-edit system prompt (the reference's
  "drop" condition, the CFG negative).

A `llama_template` keyword replaces the template (`{}` marks the prompt); a prompt starting with
`<|im_start|>` (or `skip_template`) is used as it is; `thinking` false appends Qwen3's empty thinking
block; `prevent_empty_text` turns "" into " ".

Encoding (`BooguQwen3VLClipModel`: layer "hidden" -1 with the final norm applied): the last block's
output through the tower's final RMSNorm, i.e. the final normed states, of every token (template
included), `[1, T, 4096]`, with `{"attention_mask": [1, T]}`; no pooled output.
"""
from __future__ import annotations


from comfy_core.families.qwen_image.clip import EDIT_SYSTEM_PROMPT
from comfy_core.text_encoders.chat_tokenizer import VISION_BLOCK, ChatTemplateTokenizer
from comfy_core.text_encoders.encoder_set import EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.qwen3vl import QWEN3VL_8B_SLOT, QWEN3VL_8B_WIDTH
from comfy_core.text_encoders.qwen_tokenizer import PAD_ID

T2I_SYSTEM = ("You are a helpful assistant that generates high-quality images based on user instructions. "
              "The instructions are as follows.")
DROP_SYSTEM = EDIT_SYSTEM_PROMPT  # Qwen-Image's edit system turn


def chat_template(system: str, images: int = 0) -> str:
    """The template (`{}` marks the prompt): `system` then the user turn with `images` vision blocks."""
    return f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{VISION_BLOCK * images}{{}}<|im_end|>\n"


class BooguTokenizer(ChatTemplateTokenizer):
    """Boogu-Image's tokenizer (ComfyUI's `BooguTokenizer`, tokens under "qwen3vl_8b"); see the module doc."""

    clip_name, clip = QWEN3VL_8B_SLOT, QWEN3VL_8B_SLOT
    media_label = "Boogu-Image's text encoder"

    def prompt_template(self, images: int, text: str) -> str:
        """The edit system turn with the images' blocks; with neither images nor text (the empty
        negative) the edit turn too; else the text-to-image turn."""
        return chat_template(DROP_SYSTEM, images) if images or not text.strip() else chat_template(T2I_SYSTEM)

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        return getattr(self, QWEN3VL_8B_SLOT).decode(token_ids, skip_special_tokens=skip_special_tokens)


class BooguTEModel(TextEncoderSet):
    """Boogu-Image's set (ComfyUI's `BooguTEModel`, an SD1ClipModel named `qwen3vl_8b`)."""

    clip_name, clip = QWEN3VL_8B_SLOT, QWEN3VL_8B_SLOT


BOOGU_TEXT_ENCODERS = EncoderSetSpec(
    "boogu", (EncoderOptions(QWEN3VL_8B_SLOT, QWEN3VL_8B_SLOT, PAD_ID, None, False, projected_pooled=False,
                             prefixes=(f"text_encoders.{QWEN3VL_8B_SLOT}.transformer.",), kind="qwen3vl",
                             nominal_width=QWEN3VL_8B_WIDTH, min_length=1),),
    QWEN3VL_8B_SLOT, set_class=BooguTEModel, tokenizer_class=BooguTokenizer, clip_types=("boogu",))

__all__ = ["BOOGU_TEXT_ENCODERS", "BooguTEModel", "BooguTokenizer", "DROP_SYSTEM", "T2I_SYSTEM", "chat_template"]
