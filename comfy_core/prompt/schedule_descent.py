"""A linear-time recursive-descent parser for webui's prompt-editing grammar.

webui 1.10 (`modules/prompt_parser.py`) parses prompts with lark's Earley parser on an ambiguous
grammar (reference section 1.1, kept in `schedule_earley`). Earley costs far more than the prompt
is worth, so this module parses the same language directly and reproduces Earley's choice wherever
that choice is forced, and says so otherwise:

- Inside brackets the grammar is unambiguous for what it renders. A `prompt` admits no stray
  `]`, `)`, `:` or `|`, so a structure that starts at an opener (`(`, `[`) has exactly one possible
  extent and shape, whatever surrounds it: `[p]`, `[p|p...]`, `[p:N]`, `[p:p:N]`, `(p)`, `(p:p)`
  are told apart by the character after the first prompt, and `[p:N]` vs `[p:p:N]` by whether
  `[WS] NUMBER [WS] ]` follows the first colon (`]` cannot occur in a prompt, so not both).
  Structures are therefore memoised by position, which keeps the parse linear.
- At the top level (`start: (prompt | /[][():]/+)*`) an opener whose structure does not parse is
  a raw character, as are `]`, `)` and `:`. A `|` outside an alternation, or a backslash with no
  character after it on its line (plain's `\\.` does not match a newline), fails the whole parse:
  webui then keeps the prompt verbatim.
- A structure that parses may still be read as raw characters at the top level. Lark resolves
  that ambiguity by rule order (a prompt before raw characters) where it can, and by the order in
  which its Earley sets were filled where the rules tie. Fuzzing against Earley shows the tie
  only when a top-level structure holding a `[from:to:N]` is directly followed by a character
  that could be raw (`[ ] ( ) :`) and some character from there on is raw (`[a:1]]]` is kept
  verbatim, `[a:1]]` is not). This parser then answers `AMBIGUOUS`, so that the caller asks Earley; the
  condition is deliberately wider than the ties themselves, and realistic prompts never meet
  it. Alternations never tie: their `|` cannot be raw.

Ported behaviour: AUTOMATIC1111 stable-diffusion-webui 1.10, `modules/prompt_parser.py`
(`schedule_parser`); the equivalence is checked against lark's Earley parser by hypothesis
fuzzing in `tests/comfy_core/test_prompt_schedule_descent.py`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Union

from comfy_core.prompt.schedule_tree import Alternate, Part, Scheduled, Sequence, walk

# lark's `plain` terminal: characters other than `\ [ ] ( ) : |`, or a backslash and any
# character but a newline (regex `.`). Whitespace is in it, so WHITESPACE tokens need no case.
_PLAIN = re.compile(r"(?:[^\\\[\]():|]|\\.)+")
# lark's `common.SIGNED_NUMBER`, with its alternatives in lark's order: the dynamic lexer takes the
# first alternative that matches, not the longest (`1.5e` gives `1.5`).
_NUMBER = re.compile(r"[+-]?(?:\d+[eE][+-]?\d+|(?:\d+\.(?:\d+)?|\.\d+)(?:[eE][+-]?\d+)?|\d+)", re.ASCII)
_SPACE = re.compile(r"\s*")
_RAW = frozenset("[]():")

# Nesting deeper than this is handed to Earley instead of risking Python's recursion limit.
MAX_DEPTH = 150


class _Ambiguous(Exception):
    """Raised inside the parser when only Earley's tie-breaking can tell the answer."""


@dataclass(frozen=True)
class Verbatim:
    """The prompt is outside webui's language (its schedule is the prompt verbatim): where, why."""

    position: int
    reason: str


AMBIGUOUS = "ambiguous"  # the answer when Earley's tie-breaking decides


@dataclass
class _Parser:
    text: str
    structures: dict[int, tuple[list[Part], int] | None] = field(default_factory=dict)
    depth: int = 0

    def prompt(self, i: int, out: list[Part]) -> int:
        """Parse `prompt` from `i` (always its longest extent, see module doc); return its end."""
        text = self.text
        n = len(text)
        while i < n:
            char = text[i]
            if char == "[" or char == "(":
                parsed = self.structure(i)
                if parsed is None:
                    return i
                parts, i = parsed
                out.extend(parts)
                continue
            match = _PLAIN.match(text, i)
            if match is None:  # `] ) : |` or a backslash at a line end
                return i
            out.append(match.group())
            i = match.end()
        return i

    def structure(self, i: int) -> tuple[list[Part], int] | None:
        """The structure opening at `i` (its parts, its end), or None; memoised by position."""
        if i in self.structures:
            return self.structures[i]
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _Ambiguous
        try:
            parsed = self._round(i) if self.text[i] == "(" else self._square(i)
        finally:
            self.depth -= 1
        self.structures[i] = parsed
        return parsed

    def _round(self, i: int) -> tuple[list[Part], int] | None:
        # emphasized: "(" prompt ")" | "(" prompt ":" prompt ")", re-emitted verbatim
        text = self.text
        parts: list[Part] = ["("]
        j = self.prompt(i + 1, parts)
        if j < len(text) and text[j] == ":":
            parts.append(":")
            j = self.prompt(j + 1, parts)
        if j < len(text) and text[j] == ")":
            parts.append(")")
            return parts, j + 1
        return None

    def _square(self, i: int) -> tuple[list[Part], int] | None:
        text = self.text
        n = len(text)
        first: list[Part] = []
        j = self.prompt(i + 1, first)
        if j >= n:
            return None
        if text[j] == "]":  # emphasized "[" prompt "]"
            return ["[", *first, "]"], j + 1
        if text[j] == "|":  # alternate "[" prompt ("|" [prompt])+ "]"
            options = [tuple(first)]
            while j < n and text[j] == "|":
                option: list[Part] = []
                j = self.prompt(j + 1, option)
                options.append(tuple(option))
            if j < n and text[j] == "]":
                return [Alternate(tuple(options))], j + 1
            return None
        if text[j] != ":":
            return None
        # scheduled "[" [prompt ":"] prompt ":" [WS] NUMBER [WS] "]"
        tail = self._number_tail(j + 1)
        if tail is not None:
            number, end = tail
            return [Scheduled(None, tuple(first), number)], end
        second: list[Part] = []
        k = self.prompt(j + 1, second)
        if k < n and text[k] == ":":
            tail = self._number_tail(k + 1)
            if tail is not None:
                number, end = tail
                return [Scheduled(tuple(first), tuple(second), number)], end
        return None

    def _number_tail(self, i: int) -> tuple[str, int] | None:
        """`[WS] NUMBER [WS] "]"` from `i`: the number's text and the end, or None."""
        text = self.text
        i = _SPACE.match(text, i).end()
        number = _NUMBER.match(text, i)
        if number is None:
            return None
        i = _SPACE.match(text, number.end()).end()
        if i < len(text) and text[i] == "]":
            return number.group(), i + 1
        return None


def _holds_schedule(parts: list[Part]) -> bool:
    return any(isinstance(node, Scheduled) for node in walk(tuple(parts)))


def parse_descent(text: str) -> Union[Sequence, Verbatim, str]:
    """Parse `text` as webui's `start` rule.

    Returns the `Sequence` Earley would build, a `Verbatim` (webui keeps the prompt verbatim), or
    `AMBIGUOUS` when the answer hangs on Earley's tie-breaking (see module doc).
    """
    parser = _Parser(text)
    out: list[Part] = []
    n = len(text)
    i = 0
    # Where a top-level structure holding a `[from:to:N]` is directly followed by a character that
    # could be raw (`[ ] ( ) :`): if any character from there on is raw, Earley's ties decide.
    tie_from = n + 1
    try:
        while i < n:
            char = text[i]
            if char == "[" or char == "(":
                parsed = parser.structure(i)
                if parsed is not None:
                    parts, i = parsed
                    out.extend(parts)
                    if i < n and text[i] in _RAW and i < tie_from and _holds_schedule(parts):
                        tie_from = i
                    continue
            if char in _RAW:
                if i >= tie_from:
                    return AMBIGUOUS
                out.append(char)
                i += 1
                continue
            match = _PLAIN.match(text, i)
            if match is None:
                reason = "'|' outside [a|b]" if char == "|" else "backslash with nothing to escape"
                return Verbatim(i, reason)
            out.append(match.group())
            i = match.end()
    except _Ambiguous:
        return AMBIGUOUS
    return _merge_text(out)


def _merge_text(parts: list[Part]) -> Sequence:
    merged: list[Part] = []
    for part in parts:
        if isinstance(part, str) and merged and isinstance(merged[-1], str):
            merged[-1] += part
        else:
            merged.append(part)
    return tuple(merged)
