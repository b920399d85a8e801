"""FLUX.2 Klein's text-encoder set (ComfyUI's `comfy/text_encoders/flux.py`: `KleinTokenizer`,
`KleinTokenizer8B`, `Qwen3_4BModel` / `Qwen3_8BModel`, `Flux2TEModel`): one Qwen3 tower, 4B
(`qwen3_4b`, 2560 wide) or 8B (`qwen3_8b`, 4096 wide), loaded by CLIPLoader type "flux2"
(`comfy_core.text_encoders.qwen3.Qwen3TextEncoder`; the set is partial: either tower forms it).

Tokenizing: the prompt in Qwen3's chat template with an empty thinking block,
`<|im_start|>user\\n{prompt}<|im_end|>\\n<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n`
(a `llama_template` keyword replaces it, `{}` marking the prompt; a `system_prompt` keyword puts
a system turn before it), prompt weights disabled, padded with `<|endoftext|>` (151643) at the end
to at least 512 tokens.

Encoding: ComfyUI's layers 9, 18 and 27, the inputs of those blocks (0-based; transformers'
`hidden_states[9 / 18 / 27]`; no final norm) for every token, with the attention mask (1 up to the
first pad), stacked per token: `[1, T, 3 * width]` (layer 9's states first), the token mask as `attention_mask`, no pooled output. Clip skip does not apply (ComfyUI's
stacking needs the three layers).

FLUX.2 dev's set (ComfyUI's `Flux2Tokenizer`, `Mistral3Tokenizer`, `Mistral3_24BModel`,
`Flux2TEModel`, `flux2_te`): one Mistral Small 3 tower (`mistral3_24b`, 5120 wide;
`comfy_core.text_encoders.mistral`), its tokenizer the file's own tekken data
(`comfy_core.text_encoders.tekken_tokenizer`). Tokenizing: the prompt in ComfyUI's template
`[SYSTEM_PROMPT]<system text>[/SYSTEM_PROMPT][INST]{prompt}[/INST]` (a `llama_template` keyword
replaces it), `<s>` (1) in front, prompt weights disabled, no end token, padded on the left with
`<pad>` (11) to `min_length` 1 (so not at all for one prompt). Encoding: ComfyUI's layers 10, 20, 30
(the inputs of those blocks) stacked per token, `[1, T, 3 * 5120]`, the token mask as
`attention_mask`; the model front-pads the states with zeros to 512 tokens (`Flux2Conditions`).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from comfy_core.text_encoders.encoder_set import EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.errors import TokenizeError
from comfy_core.text_encoders.mistral import MISTRAL_SLOT, MISTRAL_WIDTH, MistralTextEncoder
from comfy_core.text_encoders.qwen3 import QWEN3_4B_SLOT, attention_bias, rotary_tables, token_mask
from comfy_core.text_encoders.qwen_tokenizer import PAD_ID
from comfy_core.text_encoders.tekken_tokenizer import MISTRAL_PAD_ID
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer
from comfy_core.text_encoders.token_chunks import chunks_to_ids

QWEN3_8B_SLOT = "qwen3_8b"
KLEIN_LAYERS = (9, 18, 27)
KLEIN_MIN_LENGTH = 512
LLAMA_TEMPLATE = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
MISTRAL_TEMPLATE = ("[SYSTEM_PROMPT]You are an AI that reasons about image descriptions. You give structured "
                    "responses focusing on object relationships, object\nattribution and actions without "
                    "speculation.[/SYSTEM_PROMPT][INST]{}[/INST]")


class KleinTokenizer(FamilyTokenizer):
    """Klein's tokenizer (ComfyUI's `KleinTokenizer` / `KleinTokenizer8B`: tokens under the tower's
    slot name): the chat template, an optional system turn, weights disabled."""

    llama_template = LLAMA_TEMPLATE

    def tokenize_with_weights(self, text: str, return_word_ids: bool = False, llama_template: str | None = None,
                              system_prompt: str = "", **kwargs: Any) -> dict[str, list]:
        text = (self.llama_template if llama_template is None else llama_template).format(text)
        if system_prompt:
            text = "<|im_start|>system\n" + system_prompt + "<|im_end|>\n" + text
        kwargs["disable_weights"] = True
        return super().tokenize_with_weights(text, return_word_ids, **kwargs)


def stacked_states(tower: Any, rows: Sequence[Sequence[Any]], layers: Sequence[int] = KLEIN_LAYERS) -> tuple:
    """Token rows -> (the inputs of blocks `layers` (ComfyUI's intermediate layers) stacked per token
    `[B, T, len(layers) * W]`
    float32, the token mask `[B, T]`), through the Qwen3 tower's own blocks with its causal and
    padding mask; the blocks after the last wanted one are not run."""
    config = tower.config
    if max(layers) >= config.num_layers:
        raise TokenizeError(f"Flux.2 Klein: block {max(layers)} is beyond this {config.num_layers}-block Qwen3")
    pad = tower.special_tokens["pad"]
    ids, overrides = chunks_to_ids([list(r) for r in rows], tower.width, mismatch_pad=pad)
    if overrides:
        raise TokenizeError("Flux.2 Klein: prompt embeddings are not supported by its text encoder")
    mask = token_mask(rows, pad)  # [B, T]
    x = tower.embed_ids(ids)  # [B, T, W]
    cos, sin = rotary_tables(ids.shape[1], config.head_dim, config.rope_theta, x.device)
    bias = attention_bias(mask, ids.shape[1], x.device)
    wanted, out = set(layers), {}
    for index, block in enumerate(tower.transformer.model.layers):
        if index in wanted:
            out[index] = x.float()
        if len(out) == len(wanted):
            break
        x = tower._block(block, x, cos, sin, bias)
    return torch.cat([out[i] for i in layers], dim=-1), mask


class Flux2TEModel(TextEncoderSet):
    """Klein's set (ComfyUI's `Flux2TEModel`): the one Qwen3 tower's three stacked block outputs."""

    def encode_token_weights(self, tokens: Mapping[str, Any], layer_idx: int | None = None,
                             projected_pooled: bool = True) -> tuple:
        (slot,) = self.slots
        options = self.spec.options(slot)
        if options.token_key not in tokens:
            raise TokenizeError(f"tokens for encoder set {self.spec.name} lack key {options.token_key!r}; "
                                f"got keys {sorted(tokens)}")
        chunks = tokens[options.token_key]
        rows = [[pair[0] for pair in chunk] for chunk in chunks]
        tower = self.encoder(slot)
        with torch.no_grad():
            if isinstance(tower, MistralTextEncoder):  # dev: ComfyUI's layers 10 / 20 / 30
                states, mask = tower.stacked_states(rows)
            else:
                states, mask = stacked_states(tower, rows)
        cond = states.reshape(1, -1, states.shape[-1])  # chunks one after another: [1, n*T, 3W]
        return cond, None, {"attention_mask": mask.reshape(1, -1).to(cond.device)}


def _options(slot: str, width: int) -> EncoderOptions:
    return EncoderOptions(slot, slot, PAD_ID, None, False, projected_pooled=False,
                          prefixes=(f"text_encoders.{slot}.transformer.",), kind="qwen3", nominal_width=width,
                          min_length=KLEIN_MIN_LENGTH)


KLEIN_TEXT_ENCODERS = EncoderSetSpec(
    "flux2_klein", (_options(QWEN3_4B_SLOT, 2560), _options(QWEN3_8B_SLOT, 4096)), QWEN3_4B_SLOT,
    set_class=Flux2TEModel, tokenizer_class=KleinTokenizer, clip_types=("flux2",), partial=True)


class Flux2Tokenizer(FamilyTokenizer):
    """FLUX.2 dev's tokenizer (ComfyUI's `Flux2Tokenizer`: tokens under "mistral3_24b"): the
    system-prompt template around the prompt, weights disabled."""

    llama_template = MISTRAL_TEMPLATE

    def tokenize_with_weights(self, text: str, return_word_ids: bool = False, llama_template: str | None = None,
                              **kwargs: Any) -> dict[str, list]:
        text = (self.llama_template if llama_template is None else llama_template).format(text)
        kwargs["disable_weights"] = True
        return super().tokenize_with_weights(text, return_word_ids, **kwargs)


DEV_TEXT_ENCODERS = EncoderSetSpec(
    "flux2_dev", (EncoderOptions(MISTRAL_SLOT, MISTRAL_SLOT, MISTRAL_PAD_ID, None, False, projected_pooled=False,
                                 prefixes=(f"text_encoders.{MISTRAL_SLOT}.transformer.",), kind="mistral",
                                 nominal_width=MISTRAL_WIDTH, min_length=1),),
    MISTRAL_SLOT, set_class=Flux2TEModel, tokenizer_class=Flux2Tokenizer, clip_types=("flux2",))
