"""ComfyMathExpression (ComfyUI's nodes_math.py, 2026): the expression over the growing inputs
`a`..`z`, evaluated without Python's eval: only arithmetic, comparisons, boolean logic, the
named inputs and ComfyUI's function list."""
from __future__ import annotations

import math

import pytest

from nodes.errors import NodeInputError
from nodes.math_expression import ExpressionError, evaluate, math_expression
from tests.nodes.workflow_2026 import Runner, node


@pytest.mark.parametrize("expression, names, value", [
    ("a + b", {"a": 1, "b": 2}, 3), ("a / b", {"a": 1, "b": 4}, 0.25), ("a // b", {"a": 7, "b": 2}, 3),
    ("a % 3", {"a": 7}, 1), ("2 ** 10", {}, 1024), ("-a + +b", {"a": 1, "b": 5}, 4),
    ("a if a > b else b", {"a": 3, "b": 9}, 9), ("1 < a <= 3", {"a": 3}, True), ("1 < a < 3", {"a": 3}, False),
    ("a and b", {"a": 0, "b": 5}, 0), ("a or b", {"a": 0, "b": 5}, 5), ("not a", {"a": 0}, True),
    ("sum(values)", {"a": 1, "b": 2, "values": [1, 2]}, 3), ("sum(a, b, 3)", {"a": 1, "b": 2}, 6),
    ("max(a, b) - min(a, b)", {"a": 2, "b": 7}, 5), ("sqrt(16) + floor(2.7) + ceil(0.1)", {}, 7.0),
    ("round(a, 1)", {"a": 2.345}, 2.3), ("pow(2, 3)", {}, 8), ("int(a) + float(b)", {"a": 2.9, "b": 1}, 3.0),
    ("log10(1000)", {}, 3.0), ("values[1]", {"values": [4, 5]}, 5), ("True + 1", {}, 2), ("a & 6", {"a": 3}, 2),
    # as the newest official templates use it (image_lens_turbo_t2i, video_minimax_h3_t2v)
    ("a & -8", {"a": 1031}, 1024),
    ("max(5, round(a * 24)) + (5 - (max(5, round(a * 24)) % 17)) % 17", {"a": 5.0}, 124),
])
def test_evaluates_what_comfyui_allows(expression, names, value):
    assert evaluate(expression, names) == value


@pytest.mark.parametrize("expression", [
    "__import__('os')", "a.__class__", "open('x')", "(lambda: 1)()", "[x for x in values]", "'text'",
    "eval('1')", "a := 1", "{1: 2}", "pow(10, 5000)", "10 ** 5000", "b", "1 / 0", "1 +", "values['a']",
    "sqrt(-1)",
])
def test_anything_else_is_refused_with_a_reason(expression):
    with pytest.raises(ExpressionError) as err:
        evaluate(expression, {"a": 1, "values": [1]})
    assert str(err.value)


def test_the_node_gives_float_int_and_bool():
    assert math_expression("a * b", {"a": 2.5, "b": 3}) == (7.5, 7, True)
    assert math_expression("a - a", {"a": 4}) == (0.0, 0, False)
    assert math_expression("a > b", {"a": 2, "b": 1}) == (1.0, 1, True)


@pytest.mark.parametrize("expression", ["", "   ", "a > b and 'x'", "2.0 ** 1000 * 2.0 ** 1000", "q + 1"])
def test_the_node_refuses_empty_non_numeric_non_finite_or_unknown(expression):
    with pytest.raises(NodeInputError):
        math_expression(expression, {"a": 2, "b": 1})


def test_a_huge_integer_result_is_refused_as_comfyui_does():
    with pytest.raises(NodeInputError, match="too large"):
        math_expression("9 ** 4000", {})
    assert math.isfinite(math_expression("9 ** 300", {})[0])


async def test_growing_inputs_arrive_as_the_editor_names_them(tmp_path):
    runner = Runner(tmp_path)
    prompt = {"x": node("PrimitiveInt", value=6), "y": node("PrimitiveFloat", value=1.5),
              "m": node("ComfyMathExpression", expression="a * b + sum(values)",
                        **{"values.a": ["x", 0], "values.b": ["y", 0]}),
              "f": node("PreviewAny", source=["m", 0]), "i": node("PreviewAny", source=["m", 1]),
              "b": node("PreviewAny", source=["m", 2])}
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    assert [out.ui_outputs[k]["text"] for k in "fib"] == [["16.5"], ["16"], ["True"]]


async def test_the_growing_inputs_are_a_to_z(tmp_path):
    runner = Runner(tmp_path)
    prompt = {"x": node("PrimitiveInt", value=6),
              "m": node("ComfyMathExpression", expression="a", **{"values.a": ["x", 0]}),
              "f": node("PreviewAny", source=["m", 0])}
    assert (await runner.validate(prompt)).ok
    names = {i.name for i in runner.registry.get("ComfyMathExpression").inputs}
    assert {"values.a", "values.z"} <= names and "values.aa" not in names
