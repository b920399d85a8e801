"""Prompt editing and alternation: AUTOMATIC1111's `get_learned_conditioning_prompt_schedules`.

`[from:to:N]` switches text at step N, `[to:N]` adds text after N, `[from::N]` removes it after N,
`[a|b|c]` cycles one option per step. Behaviour of webui 1.10 `modules/prompt_parser.py`, written
here from `shared/reference/a1111-prompt.md` section 1 (grammar, `collect_steps`, `at_step`):

- the grammar is parsed with lark's Earley parser; a prompt it cannot parse is one schedule entry
  holding the whole prompt unchanged (webui swallows the error, so do we);
- a number with a `.` is a fraction of the steps (even when >= 1), otherwise an absolute step;
  `when = min(steps, int(value))` and only `when >= 1` adds a boundary;
- every alternation adds all steps `1..steps` as boundaries; `steps` is always a boundary;
- escapes, emphasis brackets and stray brackets are copied verbatim into the texts.

Results are webui's shape: one `[[end_step, text], ...]` list per input prompt.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Iterable, Sequence

import lark

# The language of webui's schedule parser. The top level accepts runs of stray brackets and
# colons as raw text (kept by `!`), which is why `a b]` or `((a][:b:c` still parse. Emphasis is
# only recognised so that its brackets are not taken for scheduling; it is re-emitted verbatim.
# Rule shapes matter beyond the accepted language: Earley resolves ambiguities by rule order.
_GRAMMAR = r"""
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
    return lark.Lark(_GRAMMAR)


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


@functools.lru_cache(maxsize=256)
def parse_schedule_tree(prompt: str) -> tuple[lark.Tree, list[int]] | None:
    """The parse tree of `compress_runs(prompt)` and its position map, or None where webui would
    fall back to the literal prompt (any lark error).

    Memoised: a pure function of the text, and the same prompt is parsed when a node is validated,
    run, and re-run with another step count. Callers only read the tree.
    """
    short, positions = compress_runs(prompt)
    try:
        return schedule_parser().parse(short), positions
    except lark.exceptions.LarkError:
        return None


def switch_step(number: str, steps: int, *, base_steps: int, hires: bool, use_old_scheduling: bool) -> int:
    """The step after which a `[from:to:number]` switches (webui's `collect_steps` arithmetic).

    New timelines: a dotted number is a fraction of `steps` (hires pass: `1.0..2.0` spans it),
    an integer is an absolute step (hires pass: counted from the start of the first pass).
    Old timelines: `v < 1` is a fraction, anything else an absolute step.
    """
    value = float(number)
    if use_old_scheduling:
        value = value * steps if value < 1 else value
    elif "." in number:
        value = (value - (1.0 if hires else 0.0)) * steps
    else:
        value = value - (base_steps if hires else 0)
    return min(steps, int(value))


def _switch_steps(tree: lark.Tree, steps: int, **arithmetic) -> tuple[dict[int, int], list[int]]:
    """Map each `scheduled` node (by id) to its switch step; return it with the sorted boundaries."""
    whens: dict[int, int] = {}
    boundaries = {steps}
    for node in tree.iter_subtrees():
        if node.data == "scheduled":
            when = switch_step(str(node.children[-2]), steps, **arithmetic)
            whens[id(node)] = when
            if when >= 1:
                boundaries.add(when)
        elif node.data == "alternate":
            boundaries.update(range(1, steps + 1))
    return whens, sorted(boundaries)


@dataclass(frozen=True)
class _Source:
    text: str  # the original prompt
    positions: list[int]  # parsed offset -> offset in `text`

    def slice(self, token: lark.Token) -> str:
        return self.text[self.positions[token.start_pos]:self.positions[token.start_pos + len(token.value)]]


def _render(node: lark.Tree | lark.Token | None, step: int, whens: dict[int, int], source: _Source,
            out: list[str]) -> None:
    """Append the text `node` stands for at `step` (webui's `at_step`), from the original prompt."""
    if node is None:
        return
    if isinstance(node, lark.Token):
        out.append(source.slice(node))
        return
    if node.data == "scheduled":
        before, after = node.children[0], node.children[1]
        _render(before if step <= whens[id(node)] else after, step, whens, source, out)
    elif node.data == "alternate":
        options = node.children
        _render(options[(step - 1) % len(options)], step, whens, source, out)
    else:
        for child in node.children:
            _render(child, step, whens, source, out)


def prompt_schedule(prompt: str, base_steps: int, hires_steps: int | None = None,
                    use_old_scheduling: bool = False) -> list[list]:
    """The schedule of one prompt: `[[end_step, text], ...]`, ascending `end_step`."""
    hires = hires_steps is not None and not use_old_scheduling
    steps = hires_steps if hires else base_steps
    # Without "[" there is no editing or alternation: every parse renders the prompt verbatim,
    # and a failed parse returns it verbatim too.
    parsed = parse_schedule_tree(prompt) if "[" in prompt else None
    if parsed is None:
        return [[steps, prompt]]
    tree, positions = parsed
    source = _Source(prompt, positions)
    whens, boundaries = _switch_steps(tree, steps, base_steps=base_steps, hires=hires,
                                      use_old_scheduling=use_old_scheduling)
    schedule = []
    for step in boundaries:
        out: list[str] = []
        _render(tree, step, whens, source, out)
        schedule.append([step, "".join(out)])
    return schedule


def get_learned_conditioning_prompt_schedules(prompts: Sequence[str] | Iterable[str], base_steps: int,
                                              hires_steps: int | None = None,
                                              use_old_scheduling: bool = False) -> list[list[list]]:
    """webui's function: one schedule per prompt, in input order (each distinct prompt parsed once).

    >>> get_learned_conditioning_prompt_schedules(["a [b:3]"], 10)
    [[[3, 'a '], [10, 'a b']]]
    """
    prompts = list(prompts)
    by_text = {text: prompt_schedule(text, base_steps, hires_steps, use_old_scheduling) for text in set(prompts)}
    return [by_text[text] for text in prompts]
