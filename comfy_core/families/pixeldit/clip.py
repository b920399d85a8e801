"""PixelDiT's text-encoder set (ComfyUI's `comfy/text_encoders/pixeldit.py`: `PixelDiTGemma2Tokenizer`,
`PixelDiTGemma2TE`; behaviour read, code written here): the Gemma 2 2B tower of Lumina 2
(`comfy_core.text_encoders.gemma`, slot and tokens "gemma2_2b"; the release's
`gemma_2_2b_it_elm_*` files), loaded by CLIPLoader type "pixeldit". PiD uses the same set.

Tokenizing (`PixelDiTTokenizer`, prompt weights off):

- an empty (or blank) prompt: `<bos>` padded with `<pad>` to 300 tokens;
- otherwise PixelDiT's "chi" prompt (upstream's prompt-enhancer preamble, `CHI_PROMPT`) before the
  prompt, unless the prompt already starts with it, `<bos>` first, cut or padded with `<pad>` to
  `len(tokens(CHI_PROMPT)) + 298` tokens.

Encoding (`PixelDiTGemma2TE`): the last block's output through the final norm (ComfyUI's layer
"last"), the token mask with it; a sequence longer than 300 keeps `<bos>` and its last 299 states
(upstream's `select_index`, which the diffusion model's 300-row text position table expects), the
mask cut the same way.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

from comfy_core.text_encoders.encoder_set import EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.gemma import GEMMA2_2B_SLOT, GEMMA2_2B_WIDTH, PAD_ID
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer

MAX_LENGTH = 300
CHI_PROMPT = (
    'Given a user prompt, generate an "Enhanced prompt" that provides detailed visual descriptions '
    "suitable for image generation. Evaluate the level of detail in the user prompt:\n"
    "- If the prompt is simple, focus on adding specifics about colors, shapes, sizes, textures, "
    "and spatial relationships to create vivid and concrete scenes.\n"
    "- If the prompt is already detailed, refine and enhance the existing details slightly without "
    "overcomplicating.\n"
    "Here are examples of how to transform or refine prompts:\n"
    "- User Prompt: A cat sleeping -> Enhanced: A small, fluffy white cat curled up in a round shape, "
    "sleeping peacefully on a warm sunny windowsill, surrounded by pots of blooming red flowers.\n"
    "- User Prompt: A busy city street -> Enhanced: A bustling city street scene at dusk, featuring "
    "glowing street lamps, a diverse crowd of people in colorful clothing, and a double-decker bus "
    "passing by towering glass skyscrapers.\n"
    "Please generate only the enhanced description for the prompt below and avoid including any "
    "additional commentary or evaluations:\n"
    "User Prompt: "
)
CHI_PREFIX = 'Given a user prompt, generate an "Enhanced prompt"'  # a prompt starting so is taken as it is


class PixelDiTGemma2Tokenizer(FamilyTokenizer):
    """ComfyUI's `PixelDiTGemma2Tokenizer` (see the module doc); tokens under "gemma2_2b"."""

    clip_name, clip = GEMMA2_2B_SLOT, GEMMA2_2B_SLOT

    def _ids(self, text: str) -> list[int]:
        """`<bos>` and the ids of `text`, weights off (parentheses kept as text)."""
        chunks = getattr(self, GEMMA2_2B_SLOT).tokenize_with_weights(text, disable_weights=True)
        return [pair[0] for chunk in chunks for pair in chunk]

    def tokenize_with_weights(self, text: str, return_word_ids: bool = False, **kwargs: Any) -> dict[str, list]:
        if not (isinstance(text, str) and text.strip()):
            ids, length = self._ids(""), MAX_LENGTH
        else:
            length = len(self._ids(CHI_PROMPT)) + MAX_LENGTH - 2
            ids = self._ids(text if text.startswith(CHI_PREFIX) else CHI_PROMPT + text)
        ids = ids[:length] + [PAD_ID] * max(0, length - len(ids))
        pairs = [(t, 1.0, 0) if return_word_ids else (t, 1.0) for t in ids]
        return {GEMMA2_2B_SLOT: [pairs]}

    def state_dict(self) -> dict:
        """ComfyUI's tokenizer `state_dict`: the tower's SentencePiece model (`spiece_model`)."""
        return getattr(self, GEMMA2_2B_SLOT).state_dict()


def select_states(cond: torch.Tensor, extra: dict[str, Any]) -> tuple[torch.Tensor, dict[str, Any]]:
    """`[1, T, D]` states longer than 300: `<bos>`'s and the last 299 (the mask alike)."""
    if cond.shape[1] <= MAX_LENGTH:
        return cond, extra
    cond = torch.cat([cond[:, :1], cond[:, -(MAX_LENGTH - 1):]], dim=1)
    mask = extra.get("attention_mask")
    if mask is not None:
        extra = {**extra, "attention_mask": torch.cat([mask[..., :1], mask[..., -(MAX_LENGTH - 1):]], dim=-1)}
    return cond, extra


class PixelDiTGemma2TE(TextEncoderSet):
    """ComfyUI's `PixelDiTGemma2TE` (a LuminaModel): Gemma 2's final normed states, upstream's
    `<bos>` + last 299 selection."""

    clip_name, clip = GEMMA2_2B_SLOT, GEMMA2_2B_SLOT

    def encode_token_weights(self, tokens: Mapping[str, Any], layer_idx: int | None = None,
                             projected_pooled: bool = True) -> tuple:
        out = super().encode_token_weights(tokens, layer_idx=layer_idx, projected_pooled=projected_pooled)
        cond, pooled = out[0], out[1]
        extra = dict(out[2]) if len(out) > 2 and out[2] else {}
        cond, extra = select_states(cond, extra)
        return (cond, pooled, extra) if extra else (cond, pooled)


PIXELDIT_TEXT_ENCODERS = EncoderSetSpec(
    "pixeldit", (EncoderOptions(GEMMA2_2B_SLOT, GEMMA2_2B_SLOT, PAD_ID, None, False, projected_pooled=False,
                                prefixes=(f"text_encoders.{GEMMA2_2B_SLOT}.transformer.",), kind="gemma2",
                                nominal_width=GEMMA2_2B_WIDTH, min_length=1),),
    GEMMA2_2B_SLOT, set_class=PixelDiTGemma2TE, tokenizer_class=PixelDiTGemma2Tokenizer, clip_types=("pixeldit",))

__all__ = ["CHI_PREFIX", "CHI_PROMPT", "MAX_LENGTH", "PIXELDIT_TEXT_ENCODERS", "PixelDiTGemma2TE",
           "PixelDiTGemma2Tokenizer", "select_states"]
