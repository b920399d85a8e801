"""JoyImage Edit's text-encoder set (ComfyUI's `comfy/text_encoders/joyimage.py`: `JoyImageTokenizer`,
`Qwen3VL8B_JoyImage`, `JoyImageTEModel`): one Qwen3-VL 8B tower `qwen3vl_8b`
(`comfy_core.text_encoders.qwen3vl`, 4096 wide, its vision tower reading the reference images),
loaded by CLIPLoader type "joyimage" (the release's `qwen3vl_8b_joyimage_edit_int8_convrot.safetensors`).

Tokenizing (`JoyImageTokenizer`, over ComfyUI's `Qwen3VLTokenizer` rules: tokens under "qwen3vl_8b",
no start or end token, pad `<|endoftext|>` 151643 to `min_length` 1, prompt weights disabled): the
prompt in JoyImage's template, the system turn ` \\nDescribe the image by detailing ...` (a literal
backslash-n, as the release's template has it), then the user turn and the opened assistant turn;
with images, one `<|vision_start|><|image_pad|><|vision_end|>` block per image before the prompt.
Never a thinking block (JoyImage tokenizes with `thinking` on, whatever the caller asks). A
`llama_template` keyword replaces the template (`{}` marks the prompt); a prompt starting with
`<|im_start|>` (or `skip_template`) is used as it is; `prevent_empty_text` turns "" into " ". Each
`<|image_pad|>` (151655) becomes, in order, ComfyUI's image entry `{"type": "image", "data": IMAGE
[1, H, W, C], "original_type": "image"}`.

Encoding (`JoyImageTEModel`, `Qwen3VL8B_JoyImage`): each image through the vision tower after
JoyImage's preprocessing (resized bicubically to multiples of 32 within 65,536 .. 16,777,216 pixels,
normalised to [-1, 1]), spliced in at its entry with Qwen3-VL's M-RoPE positions and DeepStack; the
states are the last block's output without the final norm (ComfyUI's layer "hidden" -1,
`layer_norm_hidden_state` false: the pre-norm states the DiT was trained on); the first 34 positions
(`DROP_IDX`: the system turn's 33 tokens and the user turn's `<|im_start|>`, so the conditioning opens
with `user\n`) are dropped, the token mask with them, which goes along as `attention_mask` (the
network reads none of it); no pooled output.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from comfy_core.text_encoders.chat_tokenizer import ChatTemplateTokenizer, with_vision_blocks
from comfy_core.text_encoders.encoder_set import EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.errors import TokenizeError
from comfy_core.text_encoders.qwen25vl import image_position_ids, splice_images
from comfy_core.text_encoders.qwen25vl_vision import preprocess_image
from comfy_core.text_encoders.qwen3 import token_mask
from comfy_core.text_encoders.qwen3vl import QWEN3VL_8B_SLOT, QWEN3VL_8B_WIDTH
from comfy_core.text_encoders.qwen3vl_vision import MEAN, STD, Qwen3VLInputError, encode_image_patches
from comfy_core.text_encoders.qwen_tokenizer import PAD_ID

SYSTEM = ("<|im_start|>system\n \\nDescribe the image by detailing the color, shape, size, texture, quantity, text, "
          "spatial relationships of the objects and background:<|im_end|>\n")
TEMPLATE_TEXT = SYSTEM + "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
TEMPLATE_IMAGE = with_vision_blocks(TEMPLATE_TEXT, 1)
DROP_IDX = 34  # the system turn (33 tokens) and the user turn's <|im_start|>: the DiT was trained without them
MIN_PIXELS = 65_536  # JoyImage's vision preprocessing bounds (ComfyUI's `Qwen3VL8B_JoyImage`)
MAX_PIXELS = 16_777_216


class JoyImagePromptError(TokenizeError, ValueError):
    """A JoyImage prompt that cannot be tokenized or encoded as asked."""


class JoyImageTokenizer(ChatTemplateTokenizer):
    """JoyImage's tokenizer (ComfyUI's `JoyImageTokenizer`, tokens under "qwen3vl_8b"); see the module doc."""

    clip_name, clip = QWEN3VL_8B_SLOT, QWEN3VL_8B_SLOT
    llama_template = TEMPLATE_TEXT
    think_block = None  # JoyImage always tokenizes with thinking on: no think block
    media_label = "JoyImage's text encoder"
    prompt_error = JoyImagePromptError

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        return getattr(self, QWEN3VL_8B_SLOT).decode(token_ids, skip_special_tokens=skip_special_tokens)


class _JoyImageVision:
    """The tower as `splice_images` reads it, its images preprocessed JoyImage's way (see the module doc)."""

    def __init__(self, tower: Any) -> None:
        self._tower = tower

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tower, name)

    def encode_image(self, image: Any) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        tower = self._tower
        visual = getattr(tower.transformer, "visual", None)
        vision = tower.config.vision
        if visual is None or vision is None:
            raise Qwen3VLInputError("joyimage: this text encoder has no vision tower, so it cannot encode images")
        patches, grid = preprocess_image(image, vision, MEAN, STD, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS,
                                         mode="bicubic")
        tokens, deepstack = encode_image_patches(visual, vision, patches, grid)
        return tokens, grid, deepstack


def encode_row(tower: Any, row: Sequence[Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """One token row (ids, embeddings, image entries) -> (the last block's states without the final
    norm `[1, T, W]` float32, the token mask `[1, T]`), images expanded into their vision tokens."""
    row = list(row)
    if any(isinstance(token, dict) for token in row):
        features: list[list[torch.Tensor]] = []
        x, mask, images = splice_images(_JoyImageVision(tower), row, "joyimage", features)
        visual = torch.zeros(mask.shape, dtype=torch.bool)  # [1, T]: the image positions
        for start, count, _grid in images:
            visual[:, start:start + count] = True
        deepstack = [torch.cat([per_image[i] for per_image in features]) for i in range(len(features[0]))]
        positions = image_position_ids(images, x.shape[1], None, x.device)
        hidden = tower.encode_embeds(x, -1, False, mask, positions, deepstack, visual)
    else:
        x = tower.prompt_embeds(row)  # [1, T, W]
        mask = token_mask([row], tower.special_tokens["pad"])
        hidden = tower.encode_embeds(x, -1, False, mask)
    return hidden, mask


class JoyImageTEModel(TextEncoderSet):
    """JoyImage's set (ComfyUI's `JoyImageTEModel`, an SD1ClipModel named `qwen3vl_8b`): the last
    block's pre-norm states, the system turn dropped (see the module doc)."""

    clip_name, clip = QWEN3VL_8B_SLOT, QWEN3VL_8B_SLOT

    def encode_token_weights(self, tokens: Mapping[str, Any], layer_idx: int | None = None,
                             projected_pooled: bool = True) -> tuple:
        options = self.spec.options(QWEN3VL_8B_SLOT)
        if options.token_key not in tokens:
            raise TokenizeError(f"tokens for encoder set {self.spec.name} lack key {options.token_key!r}; "
                                f"got keys {sorted(tokens)}")
        tower = self.encoder(QWEN3VL_8B_SLOT)
        states, masks = [], []
        with torch.no_grad():
            for chunk in tokens[options.token_key]:
                hidden, mask = encode_row(tower, [pair[0] for pair in chunk])
                states.append(hidden)
                masks.append(mask)
        cond, mask = torch.cat(states, dim=1), torch.cat(masks, dim=1)
        if cond.shape[1] <= DROP_IDX:
            raise JoyImagePromptError(f"JoyImage: the encoded prompt has {cond.shape[1]} positions, not more than the "
                                      f"{DROP_IDX} of the template's system turn (the prompt lacks the template)")
        return cond[:, DROP_IDX:], None, {"attention_mask": mask[:, DROP_IDX:].to(cond.device)}


JOYIMAGE_TEXT_ENCODERS = EncoderSetSpec(
    "joyimage", (EncoderOptions(QWEN3VL_8B_SLOT, QWEN3VL_8B_SLOT, PAD_ID, -1, False, projected_pooled=False,
                                prefixes=(f"text_encoders.{QWEN3VL_8B_SLOT}.transformer.",), kind="qwen3vl",
                                nominal_width=QWEN3VL_8B_WIDTH, min_length=1),),
    QWEN3VL_8B_SLOT, set_class=JoyImageTEModel, tokenizer_class=JoyImageTokenizer, clip_types=("joyimage",))

__all__ = ["DROP_IDX", "JOYIMAGE_TEXT_ENCODERS", "JoyImagePromptError", "JoyImageTEModel", "JoyImageTokenizer",
           "TEMPLATE_IMAGE", "TEMPLATE_TEXT", "encode_row"]
