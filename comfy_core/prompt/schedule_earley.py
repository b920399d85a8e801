"""webui's own prompt-editing parser: lark's Earley parser on webui 1.10's grammar.

The grammar and the parser choice are webui 1.10's (`modules/prompt_parser.py`, reference
section 1.1). It is the reference the fast parser (`schedule_descent`) is tested against, and the
fallback for the rare prompts whose reading depends on how Earley breaks ties between equally
ranked derivations (see `schedule_descent`). Its output is converted to `schedule_tree` form.
"""
from __future__ import annotations

import functools
import re

import lark

from comfy_core.prompt.schedule_tree import Alternate, Part, Scheduled, Sequence

# The language of webui's schedule parser. The top level accepts runs of stray brackets and
# colons as raw text (kept by `!`), which is why `a b]` or `((a][:b:c` still parse. Emphasis is
# only recognised so that its brackets are not taken for scheduling; it is re-emitted verbatim.
# Rule shapes matter beyond the accepted language: Earley resolves ambiguities by rule order.
GRAMMAR = r"""
!start: (prompt | /[][():]/+)*
prompt: (emphasized | scheduled | alternate | plain | WHITESPACE)*
!emphasized: "(" prompt ")"
           | "(" prompt ":" prompt ")"
           | "[" prompt "]"
scheduled: "[" [prompt ":"] prompt ":" [WHITESPACE] NUMBER [WHITESPACE] "]"
alternate: "[" prompt ("|" [prompt])+ "]"
WHITESPACE: /\s+/
plain: /([^\\\[\]():|]|\\.)+/
%import common.SIGNED_NUMBER -> NUMBER
"""


@functools.lru_cache(maxsize=1)
def schedule_parser() -> lark.Lark:
    """The compiled grammar (built once on first use; immutable, so sharing it is safe)."""
    return lark.Lark(GRAMMAR)


# Runs the Earley parser can only take whole: word characters that no terminal but `plain` accepts,
# and whitespace. See `compress_runs`.
_RUNS = re.compile(r"[^\\\[\]():|\s\d+\-.eE]{2,}|\s{2,}")


def compress_runs(text: str) -> tuple[str, list[int]]:
    """Shorten every run of `_RUNS` to its first character; map positions back to `text`.

    Earley's cost grows faster than linearly with the input, and prompts are mostly words. Inside
    such a run no token can start or end: `plain` and `WHITESPACE` always take the longest match
    (lark's dynamic lexer), the run's characters are in `plain`'s class, and no other terminal
    (`NUMBER`, brackets, colon, pipe) contains them. So the parse forest of the shortened text has
    the same shape, with every run standing for itself, and lark resolves it the same way. Returns
    `(short, positions)` where `positions[k]` is the offset in `text` of offset `k` in `short`
    (`len(short) + 1` entries).
    """
    parts: list[str] = []
    positions: list[int] = []
    last = 0
    for match in _RUNS.finditer(text):
        parts.append(text[last:match.start() + 1])
        positions.extend(range(last, match.start() + 1))
        last = match.end()
    parts.append(text[last:])
    positions.extend(range(last, len(text) + 1))
    return "".join(parts), positions


def parse_earley(text: str, *, compress: bool = True) -> Sequence | None:
    """webui's parse of `text` as a `schedule_tree.Sequence`, or None where webui keeps the prompt
    verbatim (any lark error). `compress=False` parses the text as it is (for tests)."""
    short, positions = compress_runs(text) if compress else (text, list(range(len(text) + 1)))
    try:
        tree = schedule_parser().parse(short)
    except lark.exceptions.LarkError:
        return None
    return tuple(_convert(tree, text, positions))


def _convert(node: lark.Tree | lark.Token | None, text: str, positions: list[int]) -> list[Part]:
    """The parts of a lark (sub)tree, with tokens sliced from the original text."""
    if node is None:
        return []
    if isinstance(node, lark.Token):
        return [text[positions[node.start_pos]:positions[node.start_pos + len(node.value)]]]
    if node.data == "scheduled":
        before, after, number = node.children[0], node.children[1], node.children[-2]
        return [Scheduled(None if before is None else tuple(_convert(before, text, positions)),
                          tuple(_convert(after, text, positions)), str(number))]
    if node.data == "alternate":
        return [Alternate(tuple(tuple(_convert(option, text, positions)) for option in node.children))]
    parts: list[Part] = []
    for child in node.children:
        parts.extend(_convert(child, text, positions))
    return parts
