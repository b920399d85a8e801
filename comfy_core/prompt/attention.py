"""Emphasis parsing: AUTOMATIC1111's `parse_prompt_attention`.

Behaviour of webui 1.10 `modules/prompt_parser.py::parse_prompt_attention`, written here from
`shared/reference/a1111-prompt.md` section 2:

- `(x)` multiplies the weight of `x` by 1.1, `[x]` by `1/1.1`, `(x:w)` by `float(w)`;
- `\\(`, `\\)`, `\\[`, `\\]`, `\\\\` are escapes; any other backslash is dropped;
- unmatched closers are plain text; unclosed openers apply at the end of the text
  (all round ones first, then all square ones);
- `BREAK` (case-sensitive, whole word) inside text becomes the marker `["BREAK", -1]`, which is
  multiplied like any segment (so a BREAK inside brackets is no longer a chunk break);
- neighbouring segments with exactly equal weights are merged.

The result is webui's shape: a list of `[text, weight]` lists.
"""
from __future__ import annotations

import re

from comfy_core.prompt.errors import PromptSyntaxError

ROUND_MULTIPLIER = 1.1
SQUARE_MULTIPLIER = 1 / 1.1  # the Python float 0.9090909090909091, as webui

BREAK_TEXT = "BREAK"
BREAK_WEIGHT = -1  # the chunker treats exactly this weight on "BREAK" as a forced chunk end

# Alternatives are tried in this order at every position (the first that matches wins).
_TOKEN = re.compile(
    r"""
    (?P<escape>\\[()\[\]\\])            # \( \) \[ \] \\ -> the character itself
  | (?P<backslash>\\)                  # any other backslash vanishes
  | (?P<open_round>\()
  | (?P<open_square>\[)
  | :\s*(?P<weight>[+-]?[.\d]+)\s*\)   # weighted close; the number is checked later
  | (?P<close_round>\))
  | (?P<close_square>\])
  | (?P<text>[^\\()\[\]:]+)
  | (?P<colon>:)
    """,
    re.VERBOSE,
)
_BREAK = re.compile(r"\s*\bBREAK\b\s*", re.S)


def _multiply_from(segments: list[list], start: int, factor: float) -> None:
    for segment in segments[start:]:
        segment[1] *= factor


def _append_text(segments: list[list], text: str) -> None:
    for index, part in enumerate(_BREAK.split(text)):
        if index:
            segments.append([BREAK_TEXT, BREAK_WEIGHT])
        segments.append([part, 1.0])


def parse_prompt_attention(text: str) -> list[list]:
    """Split `text` into `[text, weight]` segments (webui's signature and return shape).

    >>> parse_prompt_attention("an (important) word")
    [['an ', 1.0], ['important', 1.1], [' word', 1.0]]

    Raises `PromptSyntaxError` (a `ValueError`) naming the position of a weight that is not a
    number, such as `(a:1.2.3)`, where webui raises a bare `ValueError`.
    """
    segments: list[list] = []
    round_starts: list[int] = []
    square_starts: list[int] = []
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup
        if kind == "escape":
            segments.append([match.group()[1], 1.0])
        elif kind == "backslash":
            segments.append(["", 1.0])
        elif kind == "open_round":
            round_starts.append(len(segments))
        elif kind == "open_square":
            square_starts.append(len(segments))
        elif kind == "weight" and round_starts:
            number = match.group("weight")
            try:
                factor = float(number)
            except ValueError:
                raise PromptSyntaxError(f"emphasis weight {number!r} is not a number", text=text,
                                        position=match.start("weight")) from None
            _multiply_from(segments, round_starts.pop(), factor)
        elif kind == "close_round" and round_starts:
            _multiply_from(segments, round_starts.pop(), ROUND_MULTIPLIER)
        elif kind == "close_square" and square_starts:
            _multiply_from(segments, square_starts.pop(), SQUARE_MULTIPLIER)
        else:
            # Plain text, a lone colon, or a closer with nothing open: literal text.
            _append_text(segments, match.group())
    for start in round_starts:
        _multiply_from(segments, start, ROUND_MULTIPLIER)
    for start in square_starts:
        _multiply_from(segments, start, SQUARE_MULTIPLIER)
    if not segments:
        return [["", 1.0]]
    return _merge_equal_weights(segments)


def _merge_equal_weights(segments: list[list]) -> list[list]:
    merged = [segments[0]]
    for text, weight in segments[1:]:
        if merged[-1][1] == weight:
            merged[-1][0] += text
        else:
            merged.append([text, weight])
    return merged
