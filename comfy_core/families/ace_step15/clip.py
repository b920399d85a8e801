"""ACE-Step 1.5's text-encoder set (ComfyUI's `comfy/text_encoders/ace15.py`: `ACE15Tokenizer`,
`ACE15TEModel`): Qwen3-Embedding-0.6B (`qwen3_06b`, 1024 wide) encodes the caption and embeds the
lyrics; the 5 Hz LM (`qwen3_2b`, ACE-Step's 1.7B, or `qwen3_4b`) writes the audio codes
(`lm_codes.py`). Loaded by DualCLIPLoader type "ace" (the two files) and from ComfyUI's all-in-one
checkpoint (`text_encoders.<slot>.transformer.`).

The tokenizer (ComfyUI's prompt formats, written here from its behaviour) makes four prompts from
TextEncodeAceStepAudio1.5's fields, all tokenized by the Qwen tokenizer with weights disabled:

- `qwen3_06b`: "# Instruction / Generate audio semantic tokens based on the given conditions:" with
  the caption and a "# Metas" list (`- bpm: ...`, `- timesignature: ...` (a trailing "/4" cut),
  `- keyscale: ...`, `- duration: N seconds` (rounded up; "30 seconds" when absent, "N/A" for the
  other missing ones)), ending in two `<|endoftext|>`;
- `lyrics`: "# Languages" (the language code) and "# Lyric" with the lyrics, two `<|endoftext|>`;
- `lm_prompt`: the chat-format prompt of the LM (system instruction, user turn with caption and
  lyrics, assistant turn holding a `<think>` block of the metas as sorted YAML: bpm, duration,
  keyscale, timesignature, values that are digit strings as numbers, "unspecified" ones left out);
- `lm_prompt_negative`: the same with the negative caption (the caption itself unless
  `use_negative_caption`) and an empty `<think>` block unless negative metas are given;
- `lm_metadata`: `min_tokens` / `max_tokens` (5 per second of the rounded-up duration; ComfyUI
  generates `min_tokens`), seed, `generate_audio_codes`, cfg_scale, temperature, top_p, top_k, min_p.

The set (`AceStep15TEModel.encode_token_weights`): the 0.6B's final normed states of `qwen3_06b`
(pads masked from attention) are the conditioning; the token embeddings of `lyrics` (ComfyUI's
layer `[0]`, the input of the first block) are `conditioning_lyrics`; with `generate_audio_codes`
the LM (the 0.6B itself when the set has none, as ComfyUI falls back) writes `audio_codes`. No
pooled output, no attention mask in the conditioning.

Which file is which: by width (1024: the 0.6B; 2048: the 1.7B LM; 2560: the 4B LM), as ComfyUI
tells them apart; reduced test towers by their vocabulary (`qwen3.py`: the 0.6B's 151,669 rows).
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Mapping

import torch
import yaml

from comfy_core.families.ace_step15.lm_codes import generate_audio_codes
from comfy_core.text_encoders.encoder_set import EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.errors import TokenizeError
from comfy_core.text_encoders.qwen_tokenizer import PAD_ID
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer
from comfy_core.text_encoders.token_chunks import chunks_to_ids

TEXT_SLOT = "qwen3_06b"
LM_SLOTS = ("qwen3_2b", "qwen3_4b")
CODES_PER_SECOND = 5
META_KEYS = ("bpm", "duration", "keyscale", "timesignature")
CAPTION_META_ORDER = ("bpm", "timesignature", "keyscale", "duration")

LM_TEMPLATE = ("<|im_start|>system\n# Instruction\nGenerate audio semantic tokens based on the given conditions:\n\n"
               "<|im_end|>\n<|im_start|>user\n# Caption\n{}\n\n# Lyric\n{}\n<|im_end|>\n<|im_start|>assistant\n{}\n\n"
               "<|im_end|>\n")
LYRICS_TEMPLATE = "# Languages\n{}\n\n# Lyric\n{}<|endoftext|><|endoftext|>"
TEXT_TEMPLATE = ("# Instruction\nGenerate audio semantic tokens based on the given conditions:\n\n# Caption\n{}\n\n"
                 "# Metas\n{}\n<|endoftext|>\n<|endoftext|>")


def _cut_quarter(value: Any) -> Any:
    return value[:-2] if isinstance(value, str) and value.endswith("/4") else value


def metas_think(metas: Mapping[str, Any]) -> str:
    """The LM's `<think>` block: the known metas as sorted YAML (digit strings as numbers,
    "unspecified" / None left out)."""
    chosen = {key: _cut_quarter(metas[key]) for key in META_KEYS if key in metas}
    chosen = {key: int(value) if isinstance(value, str) and value.isdigit() else value
              for key, value in chosen.items() if value not in ("unspecified", None)}
    body = yaml.dump(chosen, allow_unicode=True, sort_keys=True).strip() if chosen else ""
    return f"<think>\n{body}\n</think>"


def metas_caption(metas: Mapping[str, Any]) -> str:
    """The 0.6B prompt's "# Metas" lines (see the module doc)."""
    values = {key: _cut_quarter(metas.get(key, "N/A")) for key in CAPTION_META_ORDER}
    duration = values["duration"]
    if duration == "N/A":
        values["duration"] = "30 seconds"
    elif isinstance(duration, (str, int, float)) and not isinstance(duration, bool):
        values["duration"] = f"{math.ceil(float(duration))} seconds"
    else:
        raise TokenizeError(f"ACE-Step 1.5: duration must be a number or a string, got {duration!r}")
    return "\n".join(f"- {key}: {values[key]}" for key in CAPTION_META_ORDER)


class ACE15Tokenizer(FamilyTokenizer):
    """ComfyUI's `ACE15Tokenizer` (see the module doc); every prompt goes through the 0.6B slot's
    Qwen tokenizer (the LM reads the same ids)."""

    def _tokenizer(self) -> Any:
        return getattr(self, TEXT_SLOT) if TEXT_SLOT in self.slots else getattr(self, self.slots[0])

    def tokenize_with_weights(self, text: str, return_word_ids: bool = False, **kwargs: Any) -> dict[str, Any]:
        text = text.strip()
        negative_text = kwargs.get("caption_negative", text).strip()
        lyrics = kwargs.get("lyrics", "")
        negative_lyrics = kwargs.get("lyrics_negative", lyrics)
        duration = kwargs.get("duration", 120)
        if isinstance(duration, str):
            duration = float(duration.split(None, 1)[0])
        duration = math.ceil(duration)
        kwargs["duration"] = duration
        default_tokens = duration * CODES_PER_SECOND
        language = kwargs.get("language")
        negative_metas = {key.rsplit("_", 1)[0]: kwargs.pop(key) for key in
                          ("bpm_negative", "duration_negative", "keyscale_negative", "timesignature_negative",
                           "language_negative", "caption_negative") if key in kwargs}
        if not kwargs.get("use_negative_caption"):
            negative_metas.pop("caption", None)
        think = metas_think(kwargs)
        negative_think = metas_think(negative_metas) if negative_metas else "<think>\n\n</think>"
        prompts = {
            "lm_prompt": LM_TEMPLATE.format(text, lyrics.strip(), think),
            "lm_prompt_negative": LM_TEMPLATE.format(negative_text, negative_lyrics.strip(), negative_think),
            "lyrics": LYRICS_TEMPLATE.format(language if language is not None else "", lyrics),
            TEXT_SLOT: TEXT_TEMPLATE.format(text, metas_caption(kwargs)),
        }
        tokenizer = self._tokenizer()
        options = {"tokenizer_options": kwargs["tokenizer_options"]} if "tokenizer_options" in kwargs else {}
        out: dict[str, Any] = {key: tokenizer.tokenize_with_weights(prompt, key == TEXT_SLOT and return_word_ids,
                                                                    disable_weights=True, **options)
                               for key, prompt in prompts.items()}
        out["lm_metadata"] = {"min_tokens": int(kwargs.get("min_tokens", default_tokens)),
                              "max_tokens": int(kwargs.get("max_tokens", default_tokens)),
                              "seed": kwargs.get("seed", 0),
                              "generate_audio_codes": kwargs.get("generate_audio_codes", True),
                              "cfg_scale": kwargs.get("cfg_scale", 2.0), "temperature": kwargs.get("temperature", 0.85),
                              "top_p": kwargs.get("top_p", 0.9), "top_k": kwargs.get("top_k", 0.0),
                              "min_p": kwargs.get("min_p", 0.0)}
        return out


def _ids(chunks: Any) -> list[int]:
    """A prompt's (token, weight) chunks -> its ids (one row)."""
    return [int(pair[0]) for chunk in chunks for pair in chunk]


class ACE15TEModel(TextEncoderSet):
    """ComfyUI's `ACE15TEModel` (see the module doc)."""

    @property
    def lm_model(self) -> str | None:
        """ComfyUI's attribute: the LM slot the set holds (None: the 0.6B alone)."""
        return next((slot for slot in LM_SLOTS if slot in self.slots), None)

    def encode_token_weights(self, tokens: Mapping[str, Any], layer_idx: int | None = None,
                             projected_pooled: bool = True) -> tuple:
        for key in (TEXT_SLOT, "lyrics", "lm_metadata"):
            if key not in tokens:
                raise TokenizeError(f"ACE-Step 1.5 text encoders: the tokens lack {key!r} (tokenize with the "
                                    f"ACE-Step 1.5 tokenizer); got keys {sorted(tokens)}")
        if TEXT_SLOT not in self.slots:
            raise TokenizeError("ACE-Step 1.5 text encoders: the 0.6B text encoder (qwen_0.6b_ace15) is not loaded")
        encoder = self.encoder(TEXT_SLOT)
        options = replace(self.spec.options(TEXT_SLOT), layer_idx=None, layer_norm_hidden=False)
        with encoder.using_options(options):
            cond, _, *_ = encoder.encode_token_weights(tokens[TEXT_SLOT])
        ids, overrides = chunks_to_ids([_ids(tokens["lyrics"])], encoder.width, mismatch_pad=PAD_ID)
        with torch.no_grad():
            lyrics = encoder.embed_ids(ids)  # [1, L, W]: the input of the first block
        extra: dict[str, Any] = {"conditioning_lyrics": lyrics}
        meta = tokens["lm_metadata"]
        if meta["generate_audio_codes"]:
            lm = self.encoder(self.lm_model) if self.lm_model is not None else encoder
            codes = generate_audio_codes(
                lm, _ids(tokens["lm_prompt"]), _ids(tokens["lm_prompt_negative"]), min_tokens=meta["min_tokens"],
                max_tokens=meta["min_tokens"], seed=meta["seed"], cfg_scale=meta["cfg_scale"],
                temperature=meta["temperature"], top_p=meta["top_p"], top_k=meta["top_k"], min_p=meta["min_p"])
            extra["audio_codes"] = [codes]
        return cond, None, extra


def _options(slot: str, width: int) -> EncoderOptions:
    return EncoderOptions(slot, slot, PAD_ID, None, False, projected_pooled=False,
                          prefixes=(f"text_encoders.{slot}.transformer.",), kind="qwen3", nominal_width=width)


ACE15_TEXT_ENCODERS = EncoderSetSpec(
    "ace15", (_options(TEXT_SLOT, 1024), _options("qwen3_2b", 2048), _options("qwen3_4b", 2560)), TEXT_SLOT,
    set_class=ACE15TEModel, tokenizer_class=ACE15Tokenizer, clip_types=("ace",), partial=True)


__all__ = ["ACE15TEModel", "ACE15Tokenizer", "ACE15_TEXT_ENCODERS", "LM_SLOTS", "TEXT_SLOT", "metas_caption",
           "metas_think"]
