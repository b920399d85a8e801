"""ACE-Step 1's text-encoder set (ComfyUI 0.3.64's `comfy/text_encoders/ace.py`: `AceT5Tokenizer`,
`AceT5Model`), written here from its behaviour: one UMT5-base tower (`umt5base`; our umT5 tower,
`comfy_core/text_encoders/umt5.py`) run with its token mask (pads not attended) and its states kept
after the end token (ComfyUI's `zero_out_masked=False`), tokenized by the file's SentencePiece
model (`spiece_model`) with an end token, minimum length 1, no pooled output; and the lyric tokens,
which the set hands on as `conditioning_lyrics` `[1, L]` (token ids: the DiT embeds them itself).
Loaded from the all-in-one checkpoint's `text_encoders.umt5base.transformer.`.

The lyric tokens are ComfyUI's `LyricsTokenizer` chunk (`comfy_core/text_encoders/ace_lyrics.py`:
`[START]` 261, then per line its language tag and BPE tokens after ACE-Step's text cleaners, or
nothing for a blank line, each line closed by 2), over ACE-Step's lyric vocabulary (shipped in
`comfy_core/text_encoders/data/ace_lyrics/`, Apache-2.0).
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

from comfy_core.text_encoders.ace_lyrics import shared_lyrics_tokenizer
from comfy_core.text_encoders.encoder_set import PAD_ZERO, EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.errors import TokenizeError
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer
from comfy_core.text_encoders.t5_config import UMT5_SLOT

TOKEN_KEY = "umt5base"  # ComfyUI's tokens key and the set's child name
LYRICS_KEY = "lyrics"
UMT5_BASE_WIDTH = 768


class AceT5Tokenizer(FamilyTokenizer):
    """ComfyUI's `comfy.text_encoders.ace.AceT5Tokenizer`: `umt5base` tokens of the tags and
    `lyrics` tokens of `lyrics=` (one chunk; see `ace_lyrics.AceLyricsTokenizer`)."""

    clip_name, clip = TOKEN_KEY, f"clip_{TOKEN_KEY}"

    @property
    def umt5base(self) -> Any:
        return getattr(self, UMT5_SLOT)

    @property
    def voicebpe(self) -> Any:
        """ComfyUI's `AceT5Tokenizer.voicebpe`: the lyric tokenizer (`tokenize_with_weights`)."""
        return shared_lyrics_tokenizer()

    def tokenize_with_weights(self, text: str, return_word_ids: bool = False, **kwargs: Any) -> dict[str, Any]:
        out = {TOKEN_KEY: getattr(self, UMT5_SLOT).tokenize_with_weights(text, return_word_ids)}
        lyric_options = {k: v for k, v in kwargs.items() if k in ("disable_weights", "tokenizer_options")}
        out[LYRICS_KEY] = self.voicebpe.tokenize_with_weights(kwargs.get("lyrics", ""), return_word_ids,
                                                              **lyric_options)
        return out

    def state_dict(self) -> dict:
        """ComfyUI's tokenizer `state_dict`: the tower's SentencePiece model (`spiece_model`)."""
        return getattr(self, UMT5_SLOT).state_dict()


class AceT5Model(TextEncoderSet):
    """ComfyUI's `comfy.text_encoders.ace.AceT5Model` (see the module doc)."""

    clip_name, clip = TOKEN_KEY, TOKEN_KEY

    def __init__(self, spec: EncoderSetSpec, encoders: Mapping[str, Any]) -> None:
        super().__init__(spec, encoders)
        tower = self.encoder(UMT5_SLOT)
        tower.zero_out_masked = False  # ComfyUI's UMT5BaseModel(zero_out_masked=False)

    @property
    def umt5base(self) -> Any:
        return self.encoder(UMT5_SLOT)

    def encode_token_weights(self, tokens: Mapping[str, Any], layer_idx: int | None = None,
                             projected_pooled: bool = True) -> tuple:
        for key in (TOKEN_KEY, LYRICS_KEY):
            if key not in tokens:
                raise TokenizeError(f"ACE-Step text encoders: the tokens lack {key!r} (tokenize with the ACE-Step "
                                    f"tokenizer); got keys {sorted(tokens)}")
        cond, _, *_ = self.encoder(UMT5_SLOT).encode_token_weights(tokens[TOKEN_KEY])
        lyrics = torch.tensor([[int(pair[0]) for pair in tokens[LYRICS_KEY][0]]])
        return cond, None, {"conditioning_lyrics": lyrics}


ACE_TEXT_ENCODERS = EncoderSetSpec(
    "ace", (EncoderOptions(UMT5_SLOT, TOKEN_KEY, PAD_ZERO, None, True, projected_pooled=False,
                           prefixes=(f"text_encoders.{TOKEN_KEY}.transformer.",), kind="umt5",
                           nominal_width=UMT5_BASE_WIDTH, min_length=1),),
    UMT5_SLOT, set_class=AceT5Model, tokenizer_class=AceT5Tokenizer, clip_types=())

__all__ = ["ACE_TEXT_ENCODERS", "AceT5Model", "AceT5Tokenizer"]
