"""Mage-Flow's text-encoder set (ComfyUI's `comfy/text_encoders/mage_flow.py`: `MageFlowTokenizer`,
`MageFlowQwen3VLClipModel`, `MageFlowTEModel`): one Qwen3-VL 4B tower (`comfy_core.text_encoders.
qwen3vl`, the release's `qwen3vl_4b_bf16.safetensors`, slot and tokens "qwen3vl_4b"; a reduced test
tower is named the 8B, as ComfyUI names every Qwen3-VL whose merger does not project to 2560, so
the set is partial over both names), loaded by CLIPLoader type "mage".

Tokenizing (`MageFlowTokenizer` over ComfyUI's Qwen3-VL tokenizer rules: no start or end token,
`<|endoftext|>` padding to `min_length` 1, prompt weights disabled):

- without images, the text-to-image template (Qwen-Image's): `<|im_start|>system\\nDescribe the
  image by detailing ...<|im_end|>\\n<|im_start|>user\\n{prompt}<|im_end|>\\n<|im_start|>assistant\\n`;
- with images, the edit template (Qwen-Image-Edit's system prompt) whose user turn starts with
  `Image 1: <|vision_start|><|image_pad|><|vision_end|>Image 2: ...` (upstream's training-time
  multi-reference body), each `<|image_pad|>` then ComfyUI's image entry for the vision tower;
- no thinking block (ComfyUI tokenizes with `thinking` on; off appends Qwen3's empty one); a
  `llama_template` keyword replaces the template, a prompt starting with `<|im_start|>` is taken
  as it is; `image` (a batch) stands for one image per sample when `images` is empty.

Encoding (`MageFlowQwen3VLClipModel`: the last block's output through the final RMSNorm, HF's
`last_hidden_state`, 2560 wide for the 4B) then `MageFlowTEModel`'s cut of the system turn and the
`<|im_start|>user\\n` opening (upstream's drop_idx 34 / 64, found from the tokens as ComfyUI does:
`krea2/clip.py`'s `template_end`); vision tokens stay. The token mask goes with it as
`attention_mask` only when it masks something; no pooled output.
"""
from __future__ import annotations

from typing import Any, Mapping


from comfy_core.families.krea2.clip import template_end
from comfy_core.families.qwen_image.clip import EDIT_SYSTEM_PROMPT, LLAMA_TEMPLATE as QWEN_IMAGE_TEMPLATE
from comfy_core.text_encoders.chat_tokenizer import VISION_BLOCK, ChatTemplateTokenizer
from comfy_core.text_encoders.encoder_set import EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.errors import TokenizeError
from comfy_core.text_encoders.qwen3vl import QWEN3VL_4B_SLOT, QWEN3VL_4B_WIDTH, QWEN3VL_8B_SLOT, QWEN3VL_8B_WIDTH
from comfy_core.text_encoders.qwen_tokenizer import PAD_ID

MAGE_T2I_TEMPLATE = QWEN_IMAGE_TEMPLATE  # Qwen-Image's
MAGE_EDIT_TEMPLATE = (f"<|im_start|>system\n{EDIT_SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n{{}}<|im_end|>\n"
                      "<|im_start|>assistant\n")  # Qwen-Image's edit system turn


def edit_template(images: int) -> str:
    """The edit template with `Image k: <vision block>` for each of `images` before the prompt."""
    prefix = "".join(f"Image {k}: {VISION_BLOCK}" for k in range(1, images + 1))
    return MAGE_EDIT_TEMPLATE.replace("{}", prefix + "{}", 1)


class MageFlowTokenizer(ChatTemplateTokenizer):
    """ComfyUI's `MageFlowTokenizer` (see the module doc); tokens under the tower's slot name."""

    media_label = "Mage-Flow's text encoder"

    def prompt_template(self, images: int, text: str) -> str:
        return edit_template(images) if images else MAGE_T2I_TEMPLATE

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        return getattr(self, self.slots[0]).decode(token_ids, skip_special_tokens=skip_special_tokens)


class MageFlowTEModel(TextEncoderSet):
    """ComfyUI's `MageFlowTEModel`: the tower's final normed states, the template's opening cut."""

    def encode_token_weights(self, tokens: Mapping[str, Any], layer_idx: int | None = None,
                             projected_pooled: bool = True) -> tuple:
        (slot,) = self.slots  # the one tower present (4B, or a reduced one named the 8B)
        options = self.spec.options(slot)
        if options.token_key not in tokens:
            raise TokenizeError(f"tokens for encoder set {self.spec.name} lack key {options.token_key!r}; "
                                f"got keys {sorted(tokens)}")
        chunks = tokens[options.token_key]
        encoder = self.encoder(slot)
        with encoder.using_options(options):  # the tower's own call, as the base set makes it
            out = encoder.encode_token_weights(chunks)
        cond, pooled = out[0], None
        extra = dict(out[2]) if len(out) > 2 and out[2] else {}
        start = template_end([pair[0] for pair in chunks[0]], cond.shape[1])
        cond = cond[:, start:]
        mask = extra.get("attention_mask")
        if mask is not None:
            mask = mask[:, start:]
            if int(mask.sum().item()) == mask.numel():
                extra.pop("attention_mask")
            else:
                extra["attention_mask"] = mask
        return cond, pooled, extra


def _options(slot: str, width: int) -> EncoderOptions:
    return EncoderOptions(slot, slot, PAD_ID, None, False, projected_pooled=False,
                          prefixes=(f"text_encoders.{slot}.transformer.",), kind="qwen3vl", nominal_width=width,
                          min_length=1)


MAGE_TEXT_ENCODERS = EncoderSetSpec(
    "mage", (_options(QWEN3VL_4B_SLOT, QWEN3VL_4B_WIDTH), _options(QWEN3VL_8B_SLOT, QWEN3VL_8B_WIDTH)),
    QWEN3VL_4B_SLOT, set_class=MageFlowTEModel, tokenizer_class=MageFlowTokenizer, clip_types=("mage",), partial=True)

__all__ = ["MAGE_EDIT_TEMPLATE", "MAGE_T2I_TEMPLATE", "MAGE_TEXT_ENCODERS", "MageFlowTEModel", "MageFlowTokenizer",
           "edit_template"]
