"""Krea 2's text-encoder set (ComfyUI's `comfy/text_encoders/krea2.py`: `Krea2Tokenizer`,
`Krea2Qwen3VLClipModel`, `Krea2TEModel`): one Qwen3-VL tower (`comfy_core.text_encoders.qwen3vl`,
the release's `qwen3vl_4b_fp8_scaled.safetensors`, slot and tokens "qwen3vl_4b"; a reduced test
tower is named the 8B, as ComfyUI names every Qwen3-VL whose merger does not project to 2560, so
the set is partial over both names), loaded by CLIPLoader type "krea2".

Tokenizing (ComfyUI's `Krea2Tokenizer` over its `Qwen3VLTokenizer`): the prompt in Qwen-Image's
template, `<|im_start|>system\\nDescribe the image by detailing ...<|im_end|>\\n<|im_start|>user\\n
{prompt}<|im_end|>\\n<|im_start|>assistant\\n`, no think block (Krea 2 tokenizes with `thinking`
on); with images and no template given, one `<|vision_start|><|image_pad|><|vision_end|>` block per
image before the prompt; a `llama_template` keyword replaces the template (TextEncodeQwenImageEditPlus
gives its own); a text starting with `<|im_start|>` is taken as it is. Prompt weights disabled, no
start or end token, padded with `<|endoftext|>` (151643) to `min_length` 1; each `<|image_pad|>`
becomes an image entry for the vision tower.

Encoding (ComfyUI's layer list [2, 5, ..., 35], `hidden_states[k]`: the input of block k, no final
norm): the 12 taps of the tower's causal blocks (Qwen3-VL's M-RoPE positions and DeepStack with
images, plain RoPE 0..T-1 for text), stacked per token layer-major, `[1, T, 12 W]` (30720 wide for
the 4B; the DiT unpacks it); then the system turn and the `<|im_start|>user\\n` opening are cut
(ComfyUI's rule: from the second `<|im_start|>`, plus 3 when `user` and a newline follow). The token
mask goes with it as `attention_mask` only when it masks something; no pooled output.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from comfy_core.families.qwen_image.clip import LLAMA_TEMPLATE as QWEN_IMAGE_TEMPLATE
from comfy_core.text_encoders.chat_tokenizer import ChatTemplateTokenizer, is_token_id
from comfy_core.text_encoders.decoder_llm import attention_bias, rotary_tables
from comfy_core.text_encoders.encoder_set import EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.errors import TokenizeError
from comfy_core.text_encoders.qwen25vl import image_position_ids, splice_images
from comfy_core.text_encoders.qwen3 import token_mask
from comfy_core.text_encoders.qwen3vl import (QWEN3VL_4B_SLOT, QWEN3VL_4B_WIDTH, QWEN3VL_8B_SLOT, QWEN3VL_8B_WIDTH,
                                              interleaved_mrope_tables)
from comfy_core.text_encoders.qwen_tokenizer import PAD_ID

KREA2_TAPS = (2, 5, 8, 11, 14, 17, 20, 23, 26, 29, 32, 35)  # ComfyUI's: hidden_states[k], block k's input
KREA2_TEMPLATE = QWEN_IMAGE_TEMPLATE  # Qwen-Image's
IM_START, USER, NEWLINE = 151644, 872, 198


class Krea2Tokenizer(ChatTemplateTokenizer):
    """ComfyUI's `Krea2Tokenizer` (see the module doc); tokens under the tower's slot name."""

    llama_template = KREA2_TEMPLATE
    media_label = "Krea 2's text encoder"

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        return getattr(self, self.slots[0]).decode(token_ids, skip_special_tokens=skip_special_tokens)


def template_end(row: Sequence[Any], length: int) -> int:
    """Where the conditioning starts (ComfyUI's `Krea2TEModel`): the second `<|im_start|>` (the
    first when there is one; -1, the last state alone, as ComfyUI's, when none), moved past
    `user\\n` when those follow and the states are longer than that."""
    end, seen = -1, 0
    for index, token in enumerate(row):
        if is_token_id(token, IM_START) and seen < 2:
            end, seen = index, seen + 1
    if (length > end + 3 and end + 2 < len(row) and is_token_id(row[end + 1], USER)
            and is_token_id(row[end + 2], NEWLINE)):
        end += 3
    return end


def tapped_states(tower: Any, row: Sequence[Any], taps: Sequence[int] = KREA2_TAPS
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """One token row (ids, embeddings, image entries) -> (the taps' states stacked per token
    layer-major `[1, T, len(taps) W]` float32, the token mask `[1, T]`): tap k the input of block k,
    through the tower's causal blocks with its padding mask, Qwen3-VL's positions and DeepStack
    for images; the blocks after the last tap are not run."""
    config = tower.config
    if max(taps) >= config.num_layers:
        raise TokenizeError(f"Krea 2: layer {max(taps)} is beyond this {config.num_layers}-block Qwen3-VL "
                            "(Krea 2 reads the inputs of blocks 2, 5, ..., 35 of the 36-block 4B)")
    row = list(row)
    deepstack: list[torch.Tensor] = []
    visual = None
    if any(isinstance(token, dict) for token in row):
        features: list[list[torch.Tensor]] = []
        x, mask, images = splice_images(tower, row, "krea2", features)
        visual = torch.zeros(mask.shape, dtype=torch.bool)
        for start, count, _grid in images:
            visual[:, start:start + count] = True
        if features:
            deepstack = [torch.cat([per_image[i] for per_image in features]) for i in range(len(features[0]))]
        positions = image_position_ids(images, x.shape[1], None, x.device)
        cos, sin = interleaved_mrope_tables(positions, config.head_dim, config.rope_theta, config.mrope_section,
                                            x.device)
    else:
        x = tower.prompt_embeds(row)  # [1, T, W]
        mask = token_mask([row], tower.special_tokens["pad"])  # [1, T]
        cos, sin = rotary_tables(x.shape[1], config.head_dim, config.rope_theta, x.device)
    length = x.shape[1]
    bias = attention_bias(mask, length, x.device)
    wanted, out = set(taps), {}
    x = x.float()
    for index, block in enumerate(tower.transformer.model.layers):
        if index in wanted:
            out[index] = x.float()
        if len(out) == len(wanted):
            break
        x = tower._block(block, x, cos, sin, bias)
        if index < len(deepstack):
            x = x.clone()
            x[visual.to(x.device)] += deepstack[index].to(device=x.device, dtype=x.dtype)
    stacked = torch.stack([out[i] for i in taps], dim=2)  # [1, T, taps, W]
    return stacked.reshape(1, length, -1), mask


class Krea2TEModel(TextEncoderSet):
    """ComfyUI's `Krea2TEModel`: the one tower's 12 taps, the template's opening cut."""

    def encode_token_weights(self, tokens: Mapping[str, Any], layer_idx: int | None = None,
                             projected_pooled: bool = True) -> tuple:
        (slot,) = self.slots
        options = self.spec.options(slot)
        if options.token_key not in tokens:
            raise TokenizeError(f"tokens for encoder set {self.spec.name} lack key {options.token_key!r}; "
                                f"got keys {sorted(tokens)}")
        chunks = tokens[options.token_key]
        tower = self.encoder(slot)
        parts, masks = [], []
        with torch.no_grad():
            for chunk in chunks:
                states, mask = tapped_states(tower, [pair[0] for pair in chunk])
                parts.append(states)
                masks.append(mask)
        cond, mask = torch.cat(parts, dim=1), torch.cat(masks, dim=1)
        start = template_end([pair[0] for pair in chunks[0]], cond.shape[1])
        cond, mask = cond[:, start:], mask[:, start:]
        extra = {} if int(mask.sum().item()) == mask.numel() else {"attention_mask": mask.to(cond.device)}
        return cond, None, extra


def _options(slot: str, width: int) -> EncoderOptions:
    return EncoderOptions(slot, slot, PAD_ID, None, False, projected_pooled=False,
                          prefixes=(f"text_encoders.{slot}.transformer.",), kind="qwen3vl", nominal_width=width,
                          min_length=1)


KREA2_TEXT_ENCODERS = EncoderSetSpec(
    "krea2", (_options(QWEN3VL_4B_SLOT, QWEN3VL_4B_WIDTH), _options(QWEN3VL_8B_SLOT, QWEN3VL_8B_WIDTH)),
    QWEN3VL_4B_SLOT, set_class=Krea2TEModel, tokenizer_class=Krea2Tokenizer, clip_types=("krea2",), partial=True)

__all__ = ["KREA2_TAPS", "KREA2_TEMPLATE", "KREA2_TEXT_ENCODERS", "Krea2TEModel", "Krea2Tokenizer",
           "tapped_states", "template_end"]
