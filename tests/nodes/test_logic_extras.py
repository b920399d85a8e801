"""Not, And, Or and Pass or None (ComfyUI's nodes_logic.py, 2026; nodes/logic_extras.py): Python's
truthiness over values of any type, the growing `values` group as the editor sends it
(`values.value0`, ...), and Pass or None's fallback, run as prompts the way the editor sends them."""
from __future__ import annotations

import pytest
import torch

from nodes.errors import NodeInputError
from nodes.logic_extras import and_node, not_node, or_node, pass_or_none
from tests.nodes.workflow_2026 import Runner, node


@pytest.fixture
def runner(tmp_path) -> Runner:
    return Runner(tmp_path)


@pytest.mark.parametrize("value, expected", [(0, True), (3, False), ("", True), ("x", False), ([], True), ([0], False),
                                             (None, True), (0.0, True), (torch.tensor(0.0), True),
                                             (torch.tensor([2.0]), False)])
def test_not_follows_python_truthiness(value, expected):
    assert not_node(value) == (expected,)


def test_and_or_over_the_linked_values():
    assert and_node({"value0": 1, "value1": "a", "value2": [1]}) == (True,)
    assert and_node({"value0": 1, "value1": 0}) == (False,)
    assert or_node({"value0": 0, "value1": "", "value2": None}) == (False,)
    assert or_node({"value0": 0, "value1": "yes"}) == (True,)
    # all()/any() stop at the deciding value: what follows is never asked for its truth
    ambiguous = torch.ones(3)
    assert and_node({"value0": 0, "value1": ambiguous}) == (False,)
    assert or_node({"value0": 1, "value1": ambiguous}) == (True,)


def test_a_value_without_a_truth_value_names_its_input():
    with pytest.raises(NodeInputError, match="values.value1"):
        and_node({"value0": 1, "value1": torch.ones(3)})
    with pytest.raises(NodeInputError, match="value"):
        not_node(torch.ones(2, 2))


def test_pass_or_none_falls_back_and_reports_none():
    assert pass_or_none(5, 7) == (5, False)
    assert pass_or_none(0, 7) == (0, False)  # only None falls back, not a falsy value
    assert pass_or_none(None, 7) == (7, False)
    assert pass_or_none(default=7) == (7, False)
    assert pass_or_none() == (None, True)
    assert pass_or_none(None, None) == (None, True)


def ints(**values: int) -> dict:
    return {k: node("PrimitiveInt", value=v) for k, v in values.items()}


@pytest.mark.parametrize("a, b, c, want_and, want_or", [(1, 2, 3, True, True), (1, 0, 3, False, True),
                                                       (0, 0, 0, False, False)])
async def test_and_or_in_a_prompt_with_the_growing_group(runner, a, b, c, want_and, want_or):
    prompt = {**ints(a=a, b=b, c=c),
              "and": node("ComfyAndNode", **{"values.value0": ["a", 0], "values.value1": ["b", 0],
                                             "values.value2": ["c", 0]}),
              "or": node("ComfyOrNode", **{"values.value0": ["a", 0], "values.value1": ["b", 0],
                                           "values.value2": ["c", 0]}),
              "not": node("ComfyNotNode", value=["and", 0]),
              "p_and": node("PreviewAny", source=["and", 0]), "p_or": node("PreviewAny", source=["or", 0]),
              "p_not": node("PreviewAny", source=["not", 0])}
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    text = {k: out.ui_outputs[k]["text"][0].lower() for k in ("p_and", "p_or", "p_not")}
    assert text == {"p_and": str(want_and).lower(), "p_or": str(want_or).lower(), "p_not": str(not want_and).lower()}


async def test_and_needs_its_first_value(runner):
    checked = await runner.validate({"and": node("ComfyAndNode"), "p": node("PreviewAny", source=["and", 0])})
    assert not checked.ok


async def test_pass_or_none_in_a_prompt(runner):
    prompt = {"s": node("PrimitiveString", value="fallback"),
              "only_default": node("ComfyPassOrNoneNode", default=["s", 0]),
              "nothing": node("ComfyPassOrNoneNode"),
              "p1": node("PreviewAny", source=["only_default", 0]),
              "p2": node("PreviewAny", source=["only_default", 1]),
              "p3": node("PreviewAny", source=["nothing", 1])}
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    assert out.ui_outputs["p1"] == {"text": ["fallback"]}
    assert out.ui_outputs["p2"]["text"][0].lower() == "false"
    assert out.ui_outputs["p3"]["text"][0].lower() == "true"
