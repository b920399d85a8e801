"""Lumina 2's text-encoder set (ComfyUI's `comfy/text_encoders/lumina2.py`): the one Gemma 2 2B
tower `gemma2_2b` (`comfy_core.text_encoders.gemma.GemmaTextEncoder`), loaded by CLIPLoader type
"lumina2" from a Gemma 2 file (a Qwen3-4B file under that type is Z-Image's set: the towers'
slots tell them apart, from names and shapes), with ComfyUI's class names for the set and its
tokenizer (`LuminaModel`, `LuminaTokenizer`).

The conditioning is the state after the next-to-last block (of 26) for every token, `<bos>`
included, without the final norm, `[1, T, 2304]`, with `{"pooled_output": None,
"attention_mask": [1, T]}`. The prompt is tokenized as given (prompt weights parsed); Lumina 2's
system prompt is added by the `CLIPTextEncodeLumina2` node (nodes/lumina2.py), not here.
"""
from __future__ import annotations

from comfy_core.text_encoders.encoder_set import EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.gemma import GEMMA2_2B_SLOT, GEMMA2_2B_WIDTH, PAD_ID
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer


class LuminaModel(TextEncoderSet):
    """Lumina 2's text-encoder set (ComfyUI's `LuminaModel`, an SD1ClipModel named `gemma2_2b`:
    its tower is the child `gemma2_2b`)."""

    clip_name, clip = GEMMA2_2B_SLOT, GEMMA2_2B_SLOT


class LuminaTokenizer(FamilyTokenizer):
    """Lumina 2's tokenizer (ComfyUI's `LuminaTokenizer`: an SD1Tokenizer named `gemma2_2b`, tokens
    under key "gemma2_2b")."""

    clip_name, clip = GEMMA2_2B_SLOT, GEMMA2_2B_SLOT

    def state_dict(self) -> dict:
        """ComfyUI's tokenizer `state_dict`: the tower's SentencePiece model (`spiece_model`)."""
        return getattr(self, GEMMA2_2B_SLOT).state_dict()


LUMINA2_TEXT_ENCODERS = EncoderSetSpec(
    "lumina2", (EncoderOptions(GEMMA2_2B_SLOT, GEMMA2_2B_SLOT, PAD_ID, -2, False, projected_pooled=False,
                               prefixes=(f"text_encoders.{GEMMA2_2B_SLOT}.transformer.",), kind="gemma2",
                               nominal_width=GEMMA2_2B_WIDTH, min_length=1),),
    GEMMA2_2B_SLOT, set_class=LuminaModel, tokenizer_class=LuminaTokenizer, clip_types=("lumina2",))
