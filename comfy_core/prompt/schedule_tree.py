"""The parsed form of a prompt with editing and alternation, and its text at a given step.

Both schedule parsers (the recursive-descent one in `schedule_descent` and lark's Earley parser in
`schedule_earley`) produce this shape, so the step arithmetic and the rendering exist once:

- a `Sequence` is a tuple of parts; a part is verbatim text (`str`: plain words, whitespace,
  escapes, emphasis brackets and stray brackets, exactly as in the prompt), a `Scheduled` or an
  `Alternate`;
- `Scheduled(before, after, number)` is `[before:after:number]` (`before` is None for `[after:N]`);
- `Alternate(options)` is `[a|b|...]` (an empty option is an empty sequence).

Rendering is webui 1.10's `at_step` (`modules/prompt_parser.py`, reference section 1.3).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union


@dataclass(frozen=True, eq=False)
class Scheduled:
    """`[before:after:number]`; compared by identity (each occurrence has its own switch step)."""

    before: "Sequence | None"
    after: "Sequence"
    number: str  # the NUMBER token's source text: a `.` in it makes it a fraction


@dataclass(frozen=True, eq=False)
class Alternate:
    """`[a|b|c]`: option `(step - 1) % len(options)` at each step."""

    options: tuple["Sequence", ...]


Part = Union[str, Scheduled, Alternate]
Sequence = tuple[Part, ...]


def walk(sequence: Sequence):
    """Every `Scheduled` and `Alternate` node in `sequence`, nested ones included (pre-order)."""
    for part in sequence:
        if isinstance(part, Scheduled):
            yield part
            if part.before is not None:
                yield from walk(part.before)
            yield from walk(part.after)
        elif isinstance(part, Alternate):
            yield part
            for option in part.options:
                yield from walk(option)


def render(sequence: Sequence, step: int, whens: dict[int, int], out: list[str]) -> None:
    """Append the text of `sequence` at `step` to `out`; `whens` maps `id(Scheduled)` -> switch step."""
    for part in sequence:
        if isinstance(part, str):
            out.append(part)
        elif isinstance(part, Scheduled):
            chosen = part.before if step <= whens[id(part)] else part.after
            if chosen is not None:
                render(chosen, step, whens, out)
        else:
            render(part.options[(step - 1) % len(part.options)], step, whens, out)
