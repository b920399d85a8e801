"""Fibo 2.0's text-encoder set: one Qwen3-VL tower (`comfy_core.text_encoders.qwen3vl`; the release's
`qwen3vl_4b_bf16.safetensors`, slot and tokens "qwen3vl_4b"; a reduced test tower, or the 8B the
templates' prompt enhancer loads, is named the 8B as ComfyUI names every Qwen3-VL whose merger does not
project to 2560, so the set is partial over both names), loaded by CLIPLoader type "fibo2".

Tokenizing (ComfyUI's Qwen3-VL tokenizer rules: no start or end token, `<|endoftext|>` padding to
`min_length` 1, prompt weights disabled): the text in the pipeline's chat turn
`<|im_start|>user\\n{text}<|im_end|>\\n<|im_start|>assistant\\n` (no system turn, no think block:
the encoder tokenizes with `thinking` on; off appends Qwen3's empty one, as TextGenerate asks). The
text is what TextEncodeFibo2 prepared (`prompt.py`): an edit prompt already holds a vision marker per
image, each `<|image_pad|>` becoming the next image entry for the vision tower; images given with a
text that has no markers get one `<|vision_start|><|image_pad|><|vision_end|>` each at the start of
the user turn (ComfyUI's Qwen3-VL image template, TextGenerate's case). A `system_prompt` (TextGenerate,
with the template on) opens the chat as a system turn; a `llama_template` replaces the template; a
text starting with `<|im_start|>`, or `skip_template`, is taken as it is.

Encoding (the pipeline's `_get_qwen_prompt_embeds`): the hidden states `hidden_states[k]` (block k's
input; the tower's causal blocks with Qwen3-VL's M-RoPE and DeepStack for images) of layers
(9, 20, 31), (5, 16, 27), (7, 18, 29), (9, 20, 31), (11, 22, 33), (13, 24, 35): each layer scaled to
unit RMS per token (eps 1e-6, float32), each bundle its three layers concatenated, the six bundles
concatenated per token `[1, T, 6 x 3 W]` (bundle-major; 46080 wide for the 4B): the Perceiver's bundle,
then one per injection block. The whole templated sequence is kept. The token mask goes with it as
`attention_mask` only when it masks something; no pooled output.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from comfy_core.families.krea2.clip import tapped_states
from comfy_core.text_encoders.chat_tokenizer import VISION_BLOCK, ChatTemplateTokenizer, with_vision_blocks
from comfy_core.text_encoders.encoder_set import EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.errors import TokenizeError
from comfy_core.text_encoders.qwen3vl import QWEN3VL_4B_SLOT, QWEN3VL_4B_WIDTH, QWEN3VL_8B_SLOT, QWEN3VL_8B_WIDTH
from comfy_core.text_encoders.qwen_tokenizer import PAD_ID

FIBO2_TEMPLATE = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
# The Qwen3-VL layers behind the network's six text inputs: the Perceiver's, then one per injection block.
FIBO2_BUNDLES: tuple[tuple[int, int, int], ...] = ((9, 20, 31), (5, 16, 27), (7, 18, 29), (9, 20, 31),
                                                   (11, 22, 33), (13, 24, 35))
RMS_EPS = 1e-6


class Fibo2Tokenizer(ChatTemplateTokenizer):
    """Fibo 2.0's tokenizer (see the module doc); tokens under the tower's slot name."""

    llama_template = FIBO2_TEMPLATE
    media_label = "Fibo 2.0's text encoder"
    system_turn = True  # the prompt enhancer's system prompt (TextGenerate)

    def prompt_template(self, images: int, text: str) -> str:
        """The template, with the images' vision blocks unless the prompt places them itself."""
        return self.llama_template if VISION_BLOCK in text else with_vision_blocks(self.llama_template, images)

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        return getattr(self, self.slots[0]).decode(token_ids, skip_special_tokens=skip_special_tokens)


def unit_rms(states: torch.Tensor) -> torch.Tensor:
    """Each token's state scaled to unit root mean square (float32, eps 1e-6)."""
    states = states.float()
    return states * torch.rsqrt(states.pow(2).mean(dim=-1, keepdim=True) + RMS_EPS)


def bundled_states(tower: Any, row: Sequence[Any],
                   bundles: Sequence[Sequence[int]] = FIBO2_BUNDLES) -> tuple[torch.Tensor, torch.Tensor]:
    """One token row -> (the bundles `[1, T, len(bundles) x 3 W]` float32, the token mask `[1, T]`)."""
    layers = sorted({layer for bundle in bundles for layer in bundle})
    depth = tower.config.num_layers
    if layers[-1] >= depth:
        raise TokenizeError(f"Fibo 2.0: layer {layers[-1]} is beyond this {depth}-block Qwen3-VL (Fibo 2.0 reads "
                            "the hidden states up to layer 35 of the 36-block Qwen3-VL 4B)")
    stacked, mask = tapped_states(tower, row, layers)  # [1, T, len(layers) W], layer-major per token
    length, width = stacked.shape[1], stacked.shape[2] // len(layers)
    per_layer = {layer: unit_rms(stacked[:, :, i * width:(i + 1) * width]) for i, layer in enumerate(layers)}
    return torch.cat([per_layer[layer] for bundle in bundles for layer in bundle], dim=-1).reshape(1, length, -1), mask


class Fibo2TEModel(TextEncoderSet):
    """Fibo 2.0's text encoding: the tower's six bundles of RMS-normalised layers (module doc)."""

    def encode_token_weights(self, tokens: Mapping[str, Any], layer_idx: int | None = None,
                             projected_pooled: bool = True) -> tuple:
        (slot,) = self.slots  # the one tower present
        options = self.spec.options(slot)
        if options.token_key not in tokens:
            raise TokenizeError(f"tokens for encoder set {self.spec.name} lack key {options.token_key!r}; "
                                f"got keys {sorted(tokens)}")
        tower = self.encoder(slot)
        parts, masks = [], []
        with torch.no_grad():
            for chunk in tokens[options.token_key]:
                states, mask = bundled_states(tower, [pair[0] for pair in chunk])
                parts.append(states)
                masks.append(mask)
        cond, mask = torch.cat(parts, dim=1), torch.cat(masks, dim=1)
        extra = {} if int(mask.sum().item()) == mask.numel() else {"attention_mask": mask.to(cond.device)}
        return cond, None, extra


def _options(slot: str, width: int) -> EncoderOptions:
    return EncoderOptions(slot, slot, PAD_ID, None, False, projected_pooled=False,
                          prefixes=(f"text_encoders.{slot}.transformer.",), kind="qwen3vl", nominal_width=width,
                          min_length=1)


FIBO2_TEXT_ENCODERS = EncoderSetSpec(
    "fibo2", (_options(QWEN3VL_4B_SLOT, QWEN3VL_4B_WIDTH), _options(QWEN3VL_8B_SLOT, QWEN3VL_8B_WIDTH)),
    QWEN3VL_4B_SLOT, set_class=Fibo2TEModel, tokenizer_class=Fibo2Tokenizer, clip_types=("fibo2",), partial=True)

__all__ = ["FIBO2_BUNDLES", "FIBO2_TEMPLATE", "FIBO2_TEXT_ENCODERS", "Fibo2TEModel", "Fibo2Tokenizer",
           "bundled_states", "unit_rms"]
