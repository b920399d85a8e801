"""Ideogram 4's text-encoder set (ComfyUI's `comfy/text_encoders/ideogram4.py`: `Ideogram4Tokenizer`,
`Qwen3VL8BModel`, `Ideogram4TEModel`): one Qwen3-VL 8B tower `qwen3vl_8b`
(`comfy_core.text_encoders.qwen3vl.Qwen3VLTextEncoder`), loaded by CLIPLoader type "ideogram4" from a
Qwen3-VL file (the release's `qwen3vl_8b_fp8_scaled.safetensors`; its vision tower is not used).

Tokenizing (ComfyUI's `Ideogram4Tokenizer`, tokens under "qwen3vl_8b"): the prompt in the chat
template `<|im_start|>user\\n{prompt}<|im_end|>\\n<|im_start|>assistant\\n` (no thinking block; a
`llama_template` keyword replaces it, `{}` marking the prompt), prompt weights disabled, no start or
end token, padded with `<|endoftext|>` (151643) to `min_length` 1 (so one prompt is not padded).

Encoding (ComfyUI's `Qwen3VL8BModel`: layer list [1, 4, ..., 34, 36], no final norm; `Ideogram4TEModel`):
the outputs of blocks 0, 3, 6, ..., 33 and 35 (ComfyUI records block inputs, hence its +1; 36 is the
last block's output, unnormed since the tower's final norm is off), 13 taps, interleaved per channel:
feature `c * 13 + k` is channel c of tap k (`[B, T, W, 13] -> [B, T, 13 W]`, 53248 wide for the 8B),
the diffusers pipeline's packing too. The token mask goes with it as `attention_mask` (the model
leaves it out when it masks nothing); no pooled output. Text runs Qwen3's causal blocks with plain
RoPE at 0..T-1 (equal M-RoPE rows) and rope base 5e6.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from comfy_core.text_encoders.decoder_llm import attention_bias, rotary_tables
from comfy_core.text_encoders.encoder_set import EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.errors import TokenizeError
from comfy_core.text_encoders.qwen3 import token_mask
from comfy_core.text_encoders.qwen3vl import QWEN3VL_8B_SLOT, QWEN3VL_8B_WIDTH
from comfy_core.text_encoders.qwen_tokenizer import PAD_ID
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer

IDEOGRAM4_TAPS = (1, 4, 7, 10, 13, 16, 19, 22, 25, 28, 31, 34, 36)  # ComfyUI's: block inputs (36: the end)
LLAMA_TEMPLATE = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"


class Ideogram4Tokenizer(FamilyTokenizer):
    """ComfyUI's `Ideogram4Tokenizer` (tokens under "qwen3vl_8b"): the chat template, weights off."""

    clip_name, clip = QWEN3VL_8B_SLOT, QWEN3VL_8B_SLOT
    llama_template = LLAMA_TEMPLATE

    def tokenize_with_weights(self, text: str, return_word_ids: bool = False, llama_template: str | None = None,
                              **kwargs: Any) -> dict[str, list]:
        if kwargs.get("image") is not None or kwargs.get("images"):
            raise TokenizeError("Ideogram 4's text encoder takes text only")
        kwargs.pop("images", None)
        kwargs.pop("image", None)
        text = (self.llama_template if llama_template is None else llama_template).format(text)
        kwargs["disable_weights"] = True
        return super().tokenize_with_weights(text, return_word_ids, **kwargs)

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        return getattr(self, QWEN3VL_8B_SLOT).decode(token_ids, skip_special_tokens=skip_special_tokens)


def tapped_states(tower: Any, rows: Sequence[Sequence[Any]], taps: Sequence[int] = IDEOGRAM4_TAPS
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Token rows -> (the taps' states interleaved per channel `[B, T, W * len(taps)]` float32, the
    token mask `[B, T]`): tap i is the input of block i (the output of block i - 1), tap
    `num_layers` the last block's output without the final norm (ComfyUI's intermediate layers with
    `final_norm` off), run through the tower's own causal blocks with its padding mask."""
    config = tower.config
    if max(taps) > config.num_layers:
        raise TokenizeError(f"Ideogram 4: layer {max(taps)} is beyond this {config.num_layers}-block Qwen3-VL "
                            "(Ideogram 4 reads the outputs of blocks 0, 3, ..., 33 and 35 of the 36-block 8B)")
    if any(isinstance(token, Mapping) for row in rows for token in row):
        raise TokenizeError("Ideogram 4's text encoder takes text only")
    pad = tower.special_tokens["pad"]
    x = torch.cat([tower.prompt_embeds(list(row)) for row in rows], dim=0)  # [B, T, W]
    mask = token_mask([list(row) for row in rows], pad)  # [B, T]
    length = x.shape[1]
    cos, sin = rotary_tables(length, config.head_dim, config.rope_theta, x.device)
    bias = attention_bias(mask, length, x.device)
    wanted, out = set(taps), {}
    layers = tower.transformer.model.layers
    for index, block in enumerate(layers):
        if index in wanted:
            out[index] = x.float()
        if len(out) == len(wanted):
            break
        x = tower._block(block, x, cos, sin, bias)
    else:
        if len(layers) in wanted:
            out[len(layers)] = x.float()
    stacked = torch.stack([out[i] for i in taps], dim=-1)  # [B, T, W, taps]
    return stacked.reshape(x.shape[0], length, -1), mask


class Ideogram4TEModel(TextEncoderSet):
    """ComfyUI's `Ideogram4TEModel` (an SD1ClipModel named `qwen3vl_8b`): the 13 taps interleaved."""

    clip_name, clip = QWEN3VL_8B_SLOT, QWEN3VL_8B_SLOT

    def encode_token_weights(self, tokens: Mapping[str, Any], layer_idx: int | None = None,
                             projected_pooled: bool = True) -> tuple:
        (slot,) = self.slots
        options = self.spec.options(slot)
        if options.token_key not in tokens:
            raise TokenizeError(f"tokens for encoder set {self.spec.name} lack key {options.token_key!r}; "
                                f"got keys {sorted(tokens)}")
        rows = [[pair[0] for pair in chunk] for chunk in tokens[options.token_key]]
        with torch.no_grad():
            states, mask = tapped_states(self.encoder(slot), rows)
        cond = states.reshape(1, -1, states.shape[-1])  # chunks one after another: [1, n*T, 13W]
        return cond, None, {"attention_mask": mask.reshape(1, -1).to(cond.device)}


IDEOGRAM4_TEXT_ENCODERS = EncoderSetSpec(
    "ideogram4", (EncoderOptions(QWEN3VL_8B_SLOT, QWEN3VL_8B_SLOT, PAD_ID, None, False, projected_pooled=False,
                                 prefixes=(f"text_encoders.{QWEN3VL_8B_SLOT}.transformer.",), kind="qwen3vl",
                                 nominal_width=QWEN3VL_8B_WIDTH, min_length=1),),
    QWEN3VL_8B_SLOT, set_class=Ideogram4TEModel, tokenizer_class=Ideogram4Tokenizer, clip_types=("ideogram4",))

__all__ = ["IDEOGRAM4_TAPS", "IDEOGRAM4_TEXT_ENCODERS", "Ideogram4TEModel", "Ideogram4Tokenizer", "LLAMA_TEMPLATE",
           "tapped_states"]
