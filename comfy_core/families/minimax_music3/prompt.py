"""MiniMax Music 3's prompt: the caption and the lyrics in the checkpoint's special-token frame, as
ComfyUI writes it (`comfy/ldm/minimax_music/prompt.py`: `clean_caption`, `normalize_lyrics`,
`build_prompt`); written here from that behaviour.

`<|im_start|><|caption_start|>{caption}<|caption_end|><|lyrics_start|>{lyrics}<|lyrics_end|>
<|im_end|><|audio_start|>` (one line), where

- the caption: special-token-like tags `<|a b|>` become "a is b" (`<|a|>`: "a"); per line,
  markdown headings (`# ` .. `###### ` after up to three spaces) and bullets (`* `, `+ `, `- `) are
  dropped, `**bold**` and `*italic*` unwrapped, trailing spaces cut; horizontal rules (a line of
  three or more `-`, `*` or `_`) emptied; "• " and runs of four spaces removed; blank lines
  collapsed into one newline;
- the lyrics: split around bracketed tags (`[Verse]`, the spaces around them dropped), the pieces
  joined by newlines with the tags lower-cased, " ^ " a line break, `[start]` and a newline first.
"""
from __future__ import annotations

import re

_TAG = re.compile(r"<\|([^|]*)\|>")
_LYRIC_TAG = re.compile(r"\s*(\[[^\]]+\])\s*")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+")
_BULLET = re.compile(r"^\s*[*+-]\s+")
_BOLD = re.compile(r"\*\*([^*]+)\*\*")
_ITALIC = re.compile(r"(?<!\*)\*([^*\n]+)\*(?!\*)")
_RULE = re.compile(r"^\s*[-*_]{3,}\s*$", re.MULTILINE)


def _tag_text(match: re.Match[str]) -> str:
    words = match.group(1).strip().split(None, 1)
    return f"{words[0]} is {words[1]}" if len(words) == 2 else match.group(1).strip()


def _plain_line(line: str) -> str:
    line = _BULLET.sub("", _HEADING.sub("", line))
    while "**" in line:
        unwrapped = _BOLD.sub(r"\1", line)
        if unwrapped == line:
            break
        line = unwrapped
    return _ITALIC.sub(r"\1", line).rstrip()


def clean_caption(caption: str) -> str:
    text = _TAG.sub(_tag_text, caption)
    text = "\n".join(_plain_line(line) for line in text.splitlines())
    text = _RULE.sub("", text).replace("\u2022 ", "").replace("    ", "")
    return re.sub(r"\n{2,}", "\n", text)


def normalize_lyrics(lyrics: str) -> str:
    pieces = [p.lower() if p.startswith("[") else p for p in _LYRIC_TAG.split(lyrics) if p]
    return "[start]\n" + "\n".join(pieces).replace(" ^ ", "\n")


def build_prompt(caption: str, lyrics: str) -> str:
    return ("<|im_start|><|caption_start|>" + clean_caption(caption) + "<|caption_end|><|lyrics_start|>"
            + normalize_lyrics(lyrics) + "<|lyrics_end|><|im_end|><|audio_start|>")


__all__ = ["build_prompt", "clean_caption", "normalize_lyrics"]
