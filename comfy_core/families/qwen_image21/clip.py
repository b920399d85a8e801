"""Qwen-Image 2.1's text-encoder set (ComfyUI's `comfy/text_encoders/qwen_image21.py`:
`QwenImage21Tokenizer`, `QwenImage21Qwen3VLClipModel`, `QwenImage21TEModel`): one Qwen3-VL-8B tower
`qwen3vl_8b` (`comfy_core.text_encoders.qwen3vl.Qwen3VLTextEncoder`, 4096 wide), loaded by CLIPLoader
type "qwen_image" from a Qwen3-VL file (a Qwen2.5-VL file under the same type is Qwen-Image's set).

Tokenizing (ComfyUI's `QwenImage21Tokenizer.tokenize_with_weights`, tokens under "qwen3vl_8b"): the
prompt in Qwen-Image 2.1's template, the system turn "Comprehend and analyze the provided prompt."
then the user turn and the opened assistant turn; with reference images, `<imageN>` and one vision
block per image, joined by spaces, before the prompt (`qwen21.prompt_template`). A `llama_template`
keyword replaces the template (`{}` marks the prompt); a prompt starting with `<|im_start|>` (or
`skip_template`) is used as it is; `thinking` false appends Qwen3's empty thinking block
(`<think>\\n\\n</think>\\n\\n`; true, the default here, appends nothing); `prevent_empty_text`
turns "" into " ". Prompt weights are disabled. Each `<|image_pad|>` (151655) then becomes, in
order, ComfyUI's image entry `{"type": "image", "data": IMAGE [1, H, W, C], "original_type":
"image"}`, and the tokens carry `keep_vision` (TextEncodeQwenImage21: true when no VAE gives
reference latents).

Encoding (`QwenImage21TEModel.encode_token_weights`): the tower's last block's output without the
final norm (ComfyUI's layer -1, `layer_norm_hidden_state` false: transformers 4.57's
`hidden_states[-1]`, which Qwen's results are tuned to), then `qwen21.conditioning_positions`: the
system turn (everything before the second `<|im_start|>`, positions counted after each image's
expansion into its vision tokens) is dropped, and unless `keep_vision` each image's vision tokens
are dropped too, `image_slots` (per image, the kept positions before it: where the DiT splices its
reference latents) going with the conditioning. The attention mask is cut the same way and left out
when it masks nothing; no pooled output.
"""
from __future__ import annotations

from typing import Any, Mapping

from comfy_core.families.qwen_image.qwen21 import conditioning_positions, prompt_template
from comfy_core.text_encoders.chat_tokenizer import ChatTemplateTokenizer
from comfy_core.text_encoders.encoder_set import EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.errors import TokenizeError
from comfy_core.text_encoders.qwen3vl import QWEN3VL_8B_SLOT, QWEN3VL_8B_WIDTH
from comfy_core.text_encoders.qwen_tokenizer import PAD_ID

KEEP_VISION = "keep_vision"


class QwenImage21PromptError(TokenizeError, ValueError):
    """A Qwen-Image 2.1 prompt that cannot be tokenized or encoded as asked."""


def _is_image(token: Any) -> bool:
    return isinstance(token, Mapping) and token.get("type") == "image"


class QwenImage21Tokenizer(ChatTemplateTokenizer):
    """Qwen-Image 2.1's tokenizer (ComfyUI's `QwenImage21Tokenizer`, tokens under "qwen3vl_8b");
    see the module doc. `keep_vision` rides beside the tokens (`KEEP_VISION`)."""

    clip_name, clip = QWEN3VL_8B_SLOT, QWEN3VL_8B_SLOT
    media_label = "Qwen-Image 2.1's text encoder"
    prompt_error = QwenImage21PromptError

    def prompt_template(self, images: int, text: str) -> str:
        return prompt_template(images)

    def tokenize_with_weights(self, text: str, return_word_ids: bool = False, keep_vision: bool = False,
                              **kwargs: Any) -> dict[str, Any]:
        tokens = super().tokenize_with_weights(text, return_word_ids, **kwargs)
        tokens[KEEP_VISION] = bool(keep_vision)
        return tokens

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        return getattr(self, QWEN3VL_8B_SLOT).decode(token_ids, skip_special_tokens=skip_special_tokens)


class QwenImage21TEModel(TextEncoderSet):
    """Qwen-Image 2.1's set (ComfyUI's `QwenImage21TEModel`, an SD1ClipModel named `qwen3vl_8b`):
    drops the system turn and, unless kept, the vision tokens (see the module doc)."""

    clip_name, clip = QWEN3VL_8B_SLOT, QWEN3VL_8B_SLOT

    def encode_token_weights(self, tokens: Mapping[str, Any], layer_idx: int | None = None,
                             projected_pooled: bool = True) -> tuple:
        cond, pooled, *rest = super().encode_token_weights(tokens, layer_idx=layer_idx,
                                                           projected_pooled=projected_pooled)
        extra = dict(rest[0]) if rest else {}
        chunks = tokens[self.spec.options(QWEN3VL_8B_SLOT).token_key]
        first = [pair[0] for pair in chunks[0]]
        tower = self.encoder(QWEN3VL_8B_SLOT)
        sizes = [tower.image_token_count(token["data"]) for token in first if _is_image(token)]
        keep, slots = conditioning_positions(first, sizes, bool(tokens.get(KEEP_VISION, False)))
        if keep.shape[0] != cond.shape[1]:
            raise QwenImage21PromptError(f"Qwen-Image 2.1: {cond.shape[1]} encoder positions for a prompt of "
                                         f"{keep.shape[0]} (one chunk expected, got {len(chunks)})")
        cond = cond[:, keep.to(cond.device)]
        if "attention_mask" in extra:
            mask = extra["attention_mask"][:, keep.to(extra["attention_mask"].device)]
            if int(mask.sum()) == mask.numel():
                del extra["attention_mask"]  # it masks nothing (ComfyUI leaves it out)
            else:
                extra["attention_mask"] = mask
        if slots:
            extra["image_slots"] = slots
        return cond, pooled, extra


QWEN_IMAGE21_TEXT_ENCODERS = EncoderSetSpec(
    "qwen_image21", (EncoderOptions(QWEN3VL_8B_SLOT, QWEN3VL_8B_SLOT, PAD_ID, -1, False, projected_pooled=False,
                                    prefixes=(f"text_encoders.{QWEN3VL_8B_SLOT}.transformer.",), kind="qwen3vl",
                                    nominal_width=QWEN3VL_8B_WIDTH, min_length=1),),
    QWEN3VL_8B_SLOT, set_class=QwenImage21TEModel, tokenizer_class=QwenImage21Tokenizer, clip_types=("qwen_image",))
