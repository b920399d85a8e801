"""ComfySwitchNode and CustomCombo (ComfyUI's nodes_logic.py, 2026): the switch evaluates only
the taken branch, and its MatchType sockets link to any type, as in ComfyUI."""
from __future__ import annotations

import pytest

from graph.types import types_match
from nodes.logic import MISSING, custom_combo, switch_lazy_status, switch_node
from tests.nodes.workflow_2026 import Runner, node


@pytest.fixture
def runner(tmp_path) -> Runner:
    return Runner(tmp_path)


def branches(switch: bool) -> dict:
    return {"t": node("PrimitiveString", value="yes"), "f": node("PrimitiveString", value="no"),
            "t2": node("StringConcatenate", string_a=["t", 0], string_b="!", delimiter=""),
            "f2": node("StringConcatenate", string_a=["f", 0], string_b="?", delimiter=""),
            "s": node("ComfySwitchNode", switch=switch, on_true=["t2", 0], on_false=["f2", 0]),
            "len": node("StringLength", string=["s", 0]),
            "out": node("PreviewAny", source=["s", 0]), "out_len": node("PreviewAny", source=["len", 0])}


@pytest.mark.parametrize("switch, text, branch", [(True, "yes!", {"t", "t2"}), (False, "no?", {"f", "f2"})])
async def test_only_the_taken_branch_runs(runner, switch, text, branch):
    out = await runner.run(branches(switch))
    assert out.status == "success", out.error
    assert out.ui_outputs["out"] == {"text": [text]} and out.ui_outputs["out_len"] == {"text": [str(len(text))]}
    assert {"t", "t2", "f", "f2"} & set(runner.ran) == branch


async def test_an_unlinked_taken_branch_gives_none(runner):
    prompt = {"f": node("PrimitiveString", value="no"),
              "s": node("ComfySwitchNode", switch=True, on_false=["f", 0]),
              "out": node("PreviewAny", source=["s", 0])}
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    assert out.ui_outputs["out"] == {"text": ["None"]} and "f" not in runner.ran


def test_lazy_status_asks_for_the_taken_linked_branch_only():
    assert switch_lazy_status(True, None, None) == ["on_true"]
    assert switch_lazy_status(False, None, None) == ["on_false"]
    assert switch_lazy_status(True, on_false=None) == []  # on_true unlinked: nothing to ask
    assert switch_lazy_status(True, None, 5) == []
    assert switch_node(True, 1, 2) == (2,) and switch_node(False, 1, 2) == (1,) and switch_node(False) == (None,)
    assert switch_node(True, on_false=1, on_true=MISSING) == (None,)


def test_a_matchtype_socket_links_to_any_type():
    assert types_match("COMFY_MATCHTYPE_V3", "IMAGE") and types_match("LATENT", "COMFY_MATCHTYPE_V3")
    assert not types_match("LATENT", "IMAGE")


async def test_custom_combo_takes_any_choice_and_its_index(runner):
    prompt = {"c": node("CustomCombo", choice="my option", index=2, option0="a", option1="my option"),
              "s": node("PreviewAny", source=["c", 0]), "i": node("PreviewAny", source=["c", 1])}
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    assert out.ui_outputs["s"] == {"text": ["my option"]} and out.ui_outputs["i"] == {"text": ["2"]}
    assert custom_combo("x") == ("x", 0)
