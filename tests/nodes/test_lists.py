"""CreateList and GetItemFromList (ComfyUI's nodes_toolkit.py, 2026): input-list nodes. A list
output makes its consumer run once per item; GetItemFromList picks one item back out."""
from __future__ import annotations

import pytest

from nodes.errors import NodeInputError
from nodes.lists import create_list, get_item_from_list
from tests.nodes.workflow_2026 import Runner, node


@pytest.fixture
def runner(tmp_path) -> Runner:
    return Runner(tmp_path)


def strings(*values: str) -> dict:
    return {f"s{i}": node("PrimitiveString", value=v) for i, v in enumerate(values)}


async def test_a_created_list_runs_its_consumer_once_per_item(runner):
    prompt = {**strings("a", "b", "c"),
              "list": node("CreateList", **{"inputs.input0": ["s0", 0], "inputs.input1": ["s1", 0],
                                            "inputs.input2": ["s2", 0]}),
              "upper": node("StringConcatenate", string_a=["list", 0], string_b="!", delimiter=""),
              "out": node("PreviewAny", source=["upper", 0])}
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    assert out.ui_outputs["out"] == {"text": ["a!", "b!", "c!"]}
    assert runner.ran.count("upper") == 3 and runner.ran.count("list") == 1  # an input-list node runs once


async def test_list_inputs_are_joined_in_socket_order_and_lists_flatten(runner):
    inner = {**strings("x", "y"),
             "l1": node("CreateList", **{"inputs.input0": ["s0", 0], "inputs.input1": ["s1", 0]}),
             "s9": node("PrimitiveString", value="z"),
             "l2": node("CreateList", **{"inputs.input0": ["s9", 0], "inputs.input1": ["l1", 0]}),
             "out": node("PreviewAny", source=["l2", 0])}
    out = await runner.run(inner)
    assert out.status == "success", out.error
    assert out.ui_outputs["out"] == {"text": ["z", "x", "y"]}


@pytest.mark.parametrize("index, picked", [(0, "a"), (2, "c"), (-1, "c")])
async def test_get_item_from_list(runner, index, picked):
    prompt = {**strings("a", "b", "c"),
              "list": node("CreateList", **{"inputs.input0": ["s0", 0], "inputs.input1": ["s1", 0],
                                            "inputs.input2": ["s2", 0]}),
              "item": node("GetItemFromList", list=["list", 0], index=index),
              "out": node("PreviewAny", source=["item", 0])}
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    assert out.ui_outputs["out"] == {"text": [picked]}


def test_functions_directly():
    assert create_list({"input0": [1, 2], "input1": [3]}) == ([1, 2, 3],)
    assert get_item_from_list(["a", "b"], [1]) == ("b",)
    assert get_item_from_list([["p", "q", "r"]], [2]) == ("r",)  # one value holding a Python list
    with pytest.raises(NodeInputError, match="index"):
        get_item_from_list(["a"], [3])


async def test_an_index_out_of_range_is_a_node_error(runner):
    prompt = {**strings("a"), "list": node("CreateList", **{"inputs.input0": ["s0", 0]}),
              "item": node("GetItemFromList", list=["list", 0], index=5),
              "out": node("PreviewAny", source=["item", 0])}
    out = await runner.run(prompt)
    assert out.status == "error"
