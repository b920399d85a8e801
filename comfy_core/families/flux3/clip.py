"""FLUX 3's text-encoder set: one Qwen3-VL tower (`comfy_core.text_encoders.qwen3vl`, the 4B in the
release's `qwen3vl_4b_int8_convrot.safetensors`), loaded by CLIPLoader type "flux3".

Today's ComfyUI module for this type is not among the sources this project reads, so the recipe is
diffusers' (`modular_pipelines/flux3/encoders.py`, `Flux3TextEncoderStep._get_qwen3_vl_prompt_embeds`),
which BFL's FLUX 3 transformer was trained with:

- the prompt in Qwen3-VL's chat template with the generation prompt, `<|im_start|>user\\n{prompt}
  <|im_end|>\\n<|im_start|>assistant\\n` (a `llama_template` keyword replaces it, `{}` marking the
  prompt), prompt weights disabled, no start or end token;
- the tokens right-padded with `<|endoftext|>` (151643) to a multiple of 80 (`PAD_MULTIPLE`), at most
  8192 tokens (`MAX_TOKENS`; a longer prompt is cut there, as diffusers' tokenizer truncates);
- inside the encoder the padding is masked as keys (causal attention over the prompt) and its position
  ids are 1 (transformers 4.57's, the training environment's); the prompt's are 0..n-1;
- the conditioning is the inputs of blocks 4, 8, ..., 32 (`FLUX3_LAYERS`, transformers'
  `hidden_states[4 / 8 / ... / 32]`, no final norm) stacked per token, layer 4's first:
  `[1, T, 8 x width]` (20480 for the 4B), every position of the padded window included, since the
  transformer attends to the padding too; no pooled output, no attention mask.

Images in the text encoder are not part of FLUX 3's recipe (its references go to the transformer as
latents), so an image given to this tokenizer is refused (`TokenizeError`). The set is partial: a
Qwen3-VL tower of either name forms it (a reduced test model is named the 8B, as ComfyUI names every
Qwen3-VL whose merger does not project to 2560), each slot its own token key.
"""
from __future__ import annotations

import logging
import math
from typing import Any, Mapping, Sequence

import torch

from comfy_core.text_encoders.decoder_llm import attention_bias
from comfy_core.text_encoders.encoder_set import EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.errors import TokenizeError
from comfy_core.text_encoders.qwen3 import token_mask
from comfy_core.text_encoders.qwen3vl import (QWEN3VL_4B_SLOT, QWEN3VL_4B_WIDTH, QWEN3VL_8B_SLOT, QWEN3VL_8B_WIDTH,
                                              interleaved_mrope_tables)
from comfy_core.text_encoders.qwen_tokenizer import PAD_ID
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer

log = logging.getLogger(__name__)

TEMPLATE = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
PAD_MULTIPLE = 80
MAX_TOKENS = 8192
FLUX3_LAYERS = (4, 8, 12, 16, 20, 24, 28, 32)
PAD_POSITION = 1  # the position id of every padding token (see the module doc)


def padded_length(length: int) -> int:
    """The text window for `length` prompt tokens: rounded up to `PAD_MULTIPLE`, at most `MAX_TOKENS`."""
    return min(math.ceil(length / PAD_MULTIPLE) * PAD_MULTIPLE, MAX_TOKENS)


class Flux3Tokenizer(FamilyTokenizer):
    """FLUX 3's tokenizer (tokens under the tower's slot name): the chat template, weights disabled,
    the window padded (see the module doc)."""

    llama_template = TEMPLATE

    def tokenize_with_weights(self, text: str, return_word_ids: bool = False, llama_template: str | None = None,
                              images: Any = (), image: Any = None, **kwargs: Any) -> dict[str, list]:
        if images or image is not None or kwargs.get("video") is not None or kwargs.get("audio") is not None:
            raise TokenizeError("FLUX 3's text encoder takes text only (reference images go to the model as "
                                "latents: ReferenceLatent / ReferenceMultiLatent)")
        text = (self.llama_template if llama_template is None else llama_template).format(text)
        kwargs["disable_weights"] = True
        tokens = super().tokenize_with_weights(text, return_word_ids, **kwargs)
        for key, chunks in tokens.items():
            tokens[key] = [self._window(chunk) for chunk in chunks]
        return tokens

    @staticmethod
    def _window(chunk: list[tuple]) -> list[tuple]:
        if len(chunk) > MAX_TOKENS:
            log.warning("FLUX 3: a prompt of %d tokens is cut to %d, as diffusers' pipeline cuts it", len(chunk),
                        MAX_TOKENS)
            chunk = chunk[:MAX_TOKENS]
        pad = (PAD_ID, 1.0) + ((0,) if chunk and len(chunk[0]) > 2 else ())
        return list(chunk) + [pad] * (padded_length(len(chunk)) - len(chunk))


def stacked_states(tower: Any, row: Sequence[Any], layers: Sequence[int] = FLUX3_LAYERS) -> torch.Tensor:
    """One padded token row -> the inputs of blocks `layers` stacked per token `[1, T, len(layers) * W]`
    float32, through the Qwen3-VL tower's blocks with the padding masked as keys and placed at
    position 1 (see the module doc); the blocks after the last wanted one are not run."""
    config = tower.config
    if max(layers) >= config.num_layers:
        raise TokenizeError(f"FLUX 3: block {max(layers)} is beyond this {config.num_layers}-block Qwen3-VL "
                            "(FLUX 3 reads blocks 4, 8, ..., 32 of the 36-block 4B)")
    if any(isinstance(token, dict) for token in row):
        raise TokenizeError("FLUX 3's text encoder takes text only")
    x = tower.prompt_embeds(row)  # [1, T, W] (embedding vectors where the row holds them)
    mask = token_mask([list(row)], tower.special_tokens["pad"])  # [1, T]
    length = x.shape[1]
    positions = torch.arange(length).masked_fill(mask[0] == 0, PAD_POSITION)  # [T]
    cos, sin = interleaved_mrope_tables(positions.expand(3, -1), config.head_dim, config.rope_theta,
                                        config.mrope_section, x.device)  # equal rows: plain RoPE at `positions`
    bias = attention_bias(mask, length, x.device)
    wanted, out = set(layers), {}
    for index, block in enumerate(tower.transformer.model.layers):
        if index in wanted:
            out[index] = x.float()
        if len(out) == len(wanted):
            break
        x = tower._block(block, x, cos, sin, bias)
    return torch.cat([out[i] for i in layers], dim=-1)


class Flux3TEModel(TextEncoderSet):
    """FLUX 3's set: the one Qwen3-VL tower's eight stacked block inputs over the padded window."""

    def encode_token_weights(self, tokens: Mapping[str, Any], layer_idx: int | None = None,
                             projected_pooled: bool = True) -> tuple:
        (slot,) = self.slots
        options = self.spec.options(slot)
        if options.token_key not in tokens:
            raise TokenizeError(f"tokens for encoder set {self.spec.name} lack key {options.token_key!r}; "
                                f"got keys {sorted(tokens)}")
        tower = self.encoder(slot)
        with torch.no_grad():
            parts = [stacked_states(tower, [pair[0] for pair in chunk]) for chunk in tokens[options.token_key]]
        return torch.cat(parts, dim=1), None


def _options(slot: str, width: int) -> EncoderOptions:
    return EncoderOptions(slot, slot, PAD_ID, None, False, projected_pooled=False,
                          prefixes=(f"text_encoders.{slot}.transformer.",), kind="qwen3vl", nominal_width=width,
                          min_length=1)


FLUX3_TEXT_ENCODERS = EncoderSetSpec(
    "flux3", (_options(QWEN3VL_4B_SLOT, QWEN3VL_4B_WIDTH), _options(QWEN3VL_8B_SLOT, QWEN3VL_8B_WIDTH)),
    QWEN3VL_4B_SLOT, set_class=Flux3TEModel, tokenizer_class=Flux3Tokenizer, clip_types=("flux3",), partial=True)
