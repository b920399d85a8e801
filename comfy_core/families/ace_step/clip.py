"""ACE-Step 1's text-encoder set (ComfyUI 0.3.64's `comfy/text_encoders/ace.py`: `AceT5Tokenizer`,
`AceT5Model`), written here from its behaviour: one UMT5-base tower (`umt5base`; our umT5 tower,
`comfy_core/text_encoders/umt5.py`) run with its token mask (pads not attended) and its states kept
after the end token (ComfyUI's `zero_out_masked=False`), tokenized by the file's SentencePiece
model (`spiece_model`) with an end token, minimum length 1, no pooled output; and the lyric tokens,
which the set hands on as `conditioning_lyrics` `[1, L]` (token ids: the DiT embeds them itself).
Loaded from the all-in-one checkpoint's `text_encoders.umt5base.transformer.`.

Lyric tokenization (ComfyUI's `VoiceBpeTokenizer` call): start token 261, then per line of the
lyrics a blank line gives token 2, another line its BPE tokens (after ACE-Step's multilingual
text cleaners, a `[lang]` prefix and spaces as `[SPACE]`) followed by 2. The BPE vocabulary
(ACE-Step's `ace_lyrics_tokenizer/vocab.json`, Apache-2.0) is not in any package this project
installs, so lyrics with any non-blank line raise `LyricVocabularyUnavailable` naming it; blank
lyrics tokenize exactly (`[261, 2]` for an empty string).
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

from comfy_core.text_encoders.encoder_set import PAD_ZERO, EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.errors import TokenizeError
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer
from comfy_core.text_encoders.t5_config import UMT5_SLOT

TOKEN_KEY = "umt5base"  # ComfyUI's tokens key and the set's child name
LYRICS_KEY = "lyrics"
UMT5_BASE_WIDTH = 768
LYRIC_START, LYRIC_LINE_END = 261, 2
VOCABULARY = "ace_lyrics_tokenizer/vocab.json"


class LyricVocabularyUnavailable(TokenizeError):
    """ACE-Step's lyric BPE vocabulary is not available here (see the module doc)."""


def lyric_tokens(lyrics: str) -> list[int]:
    """ComfyUI's lyric token ids for `lyrics` (module doc); a `LyricVocabularyUnavailable` for a
    non-blank line."""
    ids = [LYRIC_START]
    for number, line in enumerate(lyrics.split("\n"), start=1):
        if line.strip():
            raise LyricVocabularyUnavailable(
                f"ACE-Step lyrics: line {number} ({line.strip()[:40]!r}) needs ACE-Step's lyric BPE vocabulary "
                f"({VOCABULARY}, Apache-2.0, from the ace-step package), which is not installed here; only blank "
                "lyrics (instrumentals) tokenize")
        ids.append(LYRIC_LINE_END)
    return ids


class AceT5Tokenizer(FamilyTokenizer):
    """ComfyUI's `comfy.text_encoders.ace.AceT5Tokenizer`: `umt5base` tokens of the tags and
    `lyrics` tokens of `lyrics=` (weight 1 each, one chunk)."""

    clip_name, clip = TOKEN_KEY, f"clip_{TOKEN_KEY}"

    @property
    def umt5base(self) -> Any:
        return getattr(self, UMT5_SLOT)

    def tokenize_with_weights(self, text: str, return_word_ids: bool = False, **kwargs: Any) -> dict[str, Any]:
        out = {TOKEN_KEY: getattr(self, UMT5_SLOT).tokenize_with_weights(text, return_word_ids)}
        ids = lyric_tokens(kwargs.get("lyrics", ""))
        out[LYRICS_KEY] = [[(i, 1.0, 0) if return_word_ids else (i, 1.0) for i in ids]]
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

__all__ = ["ACE_TEXT_ENCODERS", "AceT5Model", "AceT5Tokenizer", "LyricVocabularyUnavailable", "lyric_tokens"]
