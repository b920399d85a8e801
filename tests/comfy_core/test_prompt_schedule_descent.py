"""The recursive-descent schedule parser gives webui's (lark Earley's) trees, and hands Earley
exactly the prompts whose reading hangs on Earley's tie-breaking."""
import importlib.util
import re
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from comfy_core.prompt import get_learned_conditioning_prompt_schedules
from comfy_core.prompt.multicond import split_and
from comfy_core.prompt.schedule import render_schedule
from comfy_core.prompt.schedule_descent import _NUMBER, AMBIGUOUS, MAX_DEPTH, parse_descent
from comfy_core.prompt.schedule_earley import parse_earley, schedule_parser
from comfy_core.prompt.schedule_tree import Alternate, Scheduled


def canonical(sequence):
    """A tree in comparable form: neighbouring texts joined, nodes as tuples."""
    out = []
    for part in sequence:
        if isinstance(part, str):
            if out and isinstance(out[-1], str):
                out[-1] += part
            elif part:
                out.append(part)
        elif isinstance(part, Scheduled):
            out.append(("scheduled", None if part.before is None else canonical(part.before),
                        canonical(part.after), part.number))
        else:
            assert isinstance(part, Alternate)
            out.append(("alternate", tuple(canonical(option) for option in part.options)))
    return tuple(out)


def earley_schedule(prompt, steps):
    # run compression is proven not to change Earley's answer (test_prompt_schedule.py) and
    # keeps this fuzz fast
    tree = parse_earley(prompt)
    return [[steps, prompt]] if tree is None else render_schedule(tree, steps, base_steps=steps)


def assert_same_as_earley(prompt):
    fast = parse_descent(prompt)
    reference = parse_earley(prompt)
    if fast is AMBIGUOUS:
        pass
    elif isinstance(fast, tuple):
        assert reference is not None, f"Earley rejects {prompt!r}"
        assert canonical(fast) == canonical(reference), prompt
    else:
        assert reference is None, f"Earley accepts {prompt!r}, descent failed at {fast.position}"
    # the public function (fast path or Earley fallback) renders what webui renders
    for steps in (3, 10):
        assert get_learned_conditioning_prompt_schedules([prompt], steps)[0] == earley_schedule(prompt, steps)


TOKENS = ["[", "[", "]", "]", ":", ":", "|", "(", ")", "1", "3", ".5", "2.", "-1", "+4", "1e1", "e",
          "cat", "a dog", " ", "  ", "\t", "\n", " AND ", "BREAK", "\\[", "\\]", "\\(", "\\:", "\\\\",
          "\\"]

random_prompts = st.lists(st.sampled_from(TOKENS), max_size=18).map("".join)


def well_formed():
    """Prompts built from the grammar's structures, with stray tokens mixed in."""
    leaf = st.sampled_from(["cat", " ", "a b", "1", "x ", "\\[", "", "]", ":", ")"])
    number = st.sampled_from(["3", ".5", " 2 ", "1e1", "-1", "0.25"])

    def extend(inner):
        return st.one_of(
            st.tuples(inner, inner).map("".join),
            inner.map(lambda p: f"({p})"),
            st.tuples(inner, inner).map(lambda t: f"({t[0]}:{t[1]})"),
            inner.map(lambda p: f"[{p}]"),
            st.tuples(inner, number).map(lambda t: f"[{t[0]}:{t[1]}]"),
            st.tuples(inner, inner, number).map(lambda t: f"[{t[0]}:{t[1]}:{t[2]}]"),
            st.lists(inner, min_size=2, max_size=4).map(lambda options: "[" + "|".join(options) + "]"),
        )

    return st.recursive(leaf, extend, max_leaves=6)


@settings(max_examples=200, deadline=None)
@given(random_prompts)
def test_random_token_prompts_match_earley(prompt):
    assert_same_as_earley(prompt)


@settings(max_examples=120, deadline=None)
@given(well_formed())
def test_grammar_built_prompts_match_earley(prompt):
    assert_same_as_earley(prompt)


@pytest.mark.parametrize("prompt, expected", [
    # Earley's tie-breaking: the same structure is kept or read as raw characters
    ("[a:1]]", [[1, "]"], [10, "a]"]]),
    ("[a:1]]]", [[10, "[a:1]]]"]]),
    ("[a:2]):", [[10, "[a:2]):"]]),
    ("[a:2]:", [[2, ":"], [10, "a:"]]),
    ("(x[a:2])]", [[10, "(x[a:2])]"]]),
    ("[x:[a:2]:3]]:", [[2, "[x::3]]:"], [10, "[x:a:3]]:"]]),
])
def test_earley_ties_are_reproduced(prompt, expected):
    assert get_learned_conditioning_prompt_schedules([prompt], 10)[0] == expected


@pytest.mark.parametrize("prompt", ["[a:1]]]", "[a:2]):", "(x[a:2])]", "[a:2][]:"])
def test_ties_are_left_to_earley(prompt):
    assert parse_descent(prompt) is AMBIGUOUS


def test_realistic_prompts_never_need_earley():
    # the benchmark's corpus (bench/prompt.py), loaded without touching sys.path
    path = Path(__file__).resolve().parents[2] / "bench" / "prompt.py"
    spec = importlib.util.spec_from_file_location("bench_prompt_corpus", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    parts = [part for prompt in bench.CORPUS + bench.long_prompts(20) for part, _ in split_and(prompt)]
    assert all(isinstance(parse_descent(part), tuple) for part in parts)


def test_failures_name_the_position():
    failed = parse_descent("a [b|c] d|e")
    assert not isinstance(failed, tuple) and failed is not AMBIGUOUS
    assert failed.position == 9 and "|" in failed.reason
    failed = parse_descent("a [b:2] \\")
    assert failed.position == 8 and "backslash" in failed.reason


def test_deep_nesting_goes_to_earley():
    deep = "(" * (MAX_DEPTH + 1) + "[a:b:2]" + ")" * (MAX_DEPTH + 1)
    assert parse_descent(deep) is AMBIGUOUS
    assert isinstance(parse_descent("(" * (MAX_DEPTH - 2) + "[a:b:2]" + ")" * (MAX_DEPTH - 2)), tuple)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["1", "0", ".", "e", "E", "+", "-", "x", " "]), max_size=8).map("".join))
def test_number_pattern_is_larks(text):
    lark_number = next(t for t in schedule_parser().terminals if t.name == "NUMBER")
    expected = re.compile(lark_number.pattern.to_regexp()).match(text)
    actual = _NUMBER.match(text)
    assert (actual and actual.group()) == (expected and expected.group())
