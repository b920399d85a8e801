"""Prompt editing and alternation: AUTOMATIC1111's `get_learned_conditioning_prompt_schedules`.

`[from:to:N]` switches text at step N, `[to:N]` adds text after N, `[from::N]` removes it after N,
`[a|b|c]` cycles one option per step. Behaviour of webui 1.10 `modules/prompt_parser.py`, written
here from `shared/reference/a1111-prompt.md` section 1 (grammar, `collect_steps`, `at_step`):

- webui parses with lark's Earley parser (`schedule_earley`); we parse with a linear
  recursive-descent parser that gives the same trees (`schedule_descent`) and ask Earley only for
  the rare prompts whose reading hangs on Earley's tie-breaking;
- a prompt outside the language is one schedule entry holding the whole prompt unchanged
  (webui swallows the error, so do we);
- a number with a `.` is a fraction of the steps (even when >= 1), otherwise an absolute step;
  `when = min(steps, int(value))` and only `when >= 1` adds a boundary;
- every alternation adds all steps `1..steps` as boundaries; `steps` is always a boundary;
- escapes, emphasis brackets and stray brackets are copied verbatim into the texts.

Results are webui's shape: one `[[end_step, text], ...]` list per input prompt.
"""
from __future__ import annotations

import functools
from typing import Iterable, Sequence

from comfy_core.prompt.schedule_descent import AMBIGUOUS, parse_descent
from comfy_core.prompt.schedule_earley import parse_earley
from comfy_core.prompt.schedule_tree import Alternate, Scheduled, render, walk
from comfy_core.prompt.schedule_tree import Sequence as PartSequence


@functools.lru_cache(maxsize=256)
def parse_schedule_tree(prompt: str) -> PartSequence | None:
    """The parsed prompt (`schedule_tree` form), or None where webui keeps it verbatim.

    Memoised: a pure function of the text, and the same prompt is parsed when a node is validated,
    run, and re-run with another step count. Callers only read the tree (it is immutable).
    """
    parsed = parse_descent(prompt)
    if parsed is AMBIGUOUS:
        return parse_earley(prompt)
    return parsed if isinstance(parsed, tuple) else None


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


def switch_steps(tree: PartSequence, steps: int, **arithmetic) -> tuple[dict[int, int], list[int]]:
    """Map each `Scheduled` node (by id) to its switch step; return it with the sorted boundaries
    (webui's `collect_steps`)."""
    whens: dict[int, int] = {}
    boundaries = {steps}
    for node in walk(tree):
        if isinstance(node, Scheduled):
            when = switch_step(node.number, steps, **arithmetic)
            whens[id(node)] = when
            if when >= 1:
                boundaries.add(when)
        elif isinstance(node, Alternate):
            boundaries.update(range(1, steps + 1))
    return whens, sorted(boundaries)


def render_schedule(tree: PartSequence, steps: int, *, base_steps: int, hires: bool = False,
                    use_old_scheduling: bool = False) -> list[list]:
    """`[[end_step, text], ...]` for a parsed prompt (webui's `collect_steps` then `at_step`)."""
    whens, boundaries = switch_steps(tree, steps, base_steps=base_steps, hires=hires,
                                     use_old_scheduling=use_old_scheduling)
    schedule = []
    for step in boundaries:
        out: list[str] = []
        render(tree, step, whens, out)
        schedule.append([step, "".join(out)])
    return schedule


def prompt_schedule(prompt: str, base_steps: int, hires_steps: int | None = None,
                    use_old_scheduling: bool = False) -> list[list]:
    """The schedule of one prompt: `[[end_step, text], ...]`, ascending `end_step`."""
    hires = hires_steps is not None and not use_old_scheduling
    steps = hires_steps if hires else base_steps
    # Without "[" there is no editing or alternation: every parse renders the prompt verbatim,
    # and a failed parse returns it verbatim too.
    tree = parse_schedule_tree(prompt) if "[" in prompt else None
    if tree is None:
        return [[steps, prompt]]
    return render_schedule(tree, steps, base_steps=base_steps, hires=hires,
                           use_old_scheduling=use_old_scheduling)


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
