"""StartLoop / EndLoop (ComfyUI's nodes_loop.py, 2026): the body runs once per iteration by
expansion, with the iteration's index, flags, list item and carried value; End Loop returns the
last output or all of them; iterations re-run on every prompt unless cache_iterations is on."""
from __future__ import annotations

import pytest

from nodes.loops import LoopStructureError, PromptView
from tests.nodes.workflow_2026 import Runner, node


@pytest.fixture
def runner(tmp_path) -> Runner:
    return Runner(tmp_path)


def carried_concat(accumulate: bool, iterations: int = 3, cache: bool = False, **extra) -> dict:
    """x -> x+ -> x++ ...: the carried string grows by one '+' per iteration."""
    return {"init": node("PrimitiveString", value="x"),
            "s": node("StartLoop", mode="simple", **{"mode.num_iterations": iterations}, cache_iterations=cache,
                      initial_iteration_value=["init", 0]),
            "cat": node("StringConcatenate", string_a=["s", 4], string_b="+", delimiter=""),
            "e": node("EndLoop", output_value=["cat", 0], next_iteration_value=["cat", 0], accumulate=accumulate),
            "out": node("PreviewAny", source=["e", 0]), **extra}


def copies(runner: Runner, body_node: str) -> list[str]:
    return [n for n in runner.ran if n.endswith(f"_{body_node}") and "." in n]


async def test_accumulated_outputs_and_the_carried_value(runner):
    out = await runner.run(carried_concat(True))
    assert out.status == "success", out.error
    assert out.ui_outputs["out"] == {"text": ["x+", "x++", "x+++"]}
    assert len(copies(runner, "cat")) == 3 and "cat" not in runner.ran  # the prompt's own body node never runs


async def test_without_accumulate_the_last_output(runner):
    out = await runner.run(carried_concat(False, iterations=4))
    assert out.status == "success", out.error
    assert out.ui_outputs["out"] == {"text": ["x++++"]}


async def test_zero_iterations_output_nothing(runner):
    out = await runner.run(carried_concat(True, iterations=0))
    assert out.status == "success", out.error
    assert copies(runner, "cat") == []  # End Loop's list output is empty
    assert out.ui_outputs.get("out", {"text": ["None"]}) == {"text": ["None"]}


async def test_for_mode_indexes_and_position_flags(runner):
    prompt = {"s": node("StartLoop", mode="For", **{"mode.start_iteration_index": 2, "mode.max_iteration": 9,
                                                   "mode.step": 3}, cache_iterations=False),
              "fmt": node("StringFormat", **{"values.a": ["s", 0], "values.b": ["s", 1], "values.c": ["s", 2]},
                          f_string="{a}:{b}:{c}"),
              "e": node("EndLoop", output_value=["fmt", 0], accumulate=True),
              "out": node("PreviewAny", source=["e", 0])}
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    assert out.ui_outputs["out"] == {"text": ["2:True:False", "5:False:False", "8:False:True"]}


async def test_list_mode_walks_the_items(runner):
    prompt = {"a": node("PrimitiveString", value="red"), "b": node("PrimitiveString", value="green"),
              "list": node("CreateList", **{"inputs.input0": ["a", 0], "inputs.input1": ["b", 0]}),
              "s": node("StartLoop", mode="List", **{"mode.list": ["list", 0]}, cache_iterations=False),
              "cat": node("StringFormat", **{"values.a": ["s", 3], "values.b": ["s", 0]}, f_string="{a}#{b}"),
              "e": node("EndLoop", output_value=["cat", 0], accumulate=True),
              "out": node("PreviewAny", source=["e", 0])}
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    assert out.ui_outputs["out"] == {"text": ["red#0", "green#1"]}


async def test_terminations_run_every_iteration_and_the_body_is_blocked(runner):
    # A side branch that End Loop returns nothing of runs once per iteration through
    # `terminations`; a preview inside the body (an output node of the prompt) is blocked, as its
    # Start Loop gives the prompt's own body nodes nothing.
    prompt = carried_concat(True, side=node("StringConcatenate", string_a=["cat", 0], string_b="!", delimiter=""),
                            peek=node("PreviewAny", source=["cat", 0]))
    prompt["e"]["inputs"]["terminations.termination0"] = ["side", 0]
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    assert len(copies(runner, "side")) == 3 and "side" not in runner.ran
    assert "peek" not in out.ui_outputs and out.ui_outputs["out"] == {"text": ["x+", "x++", "x+++"]}


async def test_iterations_rerun_unless_cache_iterations(runner):
    for cache, reruns in ((False, 3), (True, 0)):
        await runner.run(carried_concat(True, cache=cache), prompt_id=f"first-{cache}")
        out = await runner.run(carried_concat(True, cache=cache), prompt_id=f"again-{cache}")
        assert out.status == "success", out.error
        assert out.ui_outputs["out"] == {"text": ["x+", "x++", "x+++"]}
        assert len(copies(runner, "cat")) == reruns


async def test_nested_loops(runner):
    prompt = {"outer": node("StartLoop", mode="simple", **{"mode.num_iterations": 2}, cache_iterations=False),
              "inner": node("StartLoop", mode="simple", **{"mode.num_iterations": 3}, cache_iterations=False,
                            parent_iteration=["outer", 0]),
              "fmt": node("StringFormat", **{"values.a": ["outer", 0], "values.b": ["inner", 0]},
                          f_string="{a}.{b}"),
              "inner_end": node("EndLoop", output_value=["fmt", 0], accumulate=True),
              "outer_end": node("EndLoop", output_value=["inner_end", 0], accumulate=True),
              "out": node("PreviewAny", source=["outer_end", 0])}
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    assert out.ui_outputs["out"] == {"text": ["0.0", "0.1", "0.2", "1.0", "1.1", "1.2"]}


def test_pairing_and_body():
    nodes = {"s": {"class_type": "StartLoop", "inputs": {}},
             "a": {"class_type": "X", "inputs": {"v": ["s", 0]}},
             "side": {"class_type": "X", "inputs": {"v": ["s", 0]}},
             "e": {"class_type": "EndLoop", "inputs": {"output_value": ["a", 0]}},
             "s2": {"class_type": "StartLoop", "inputs": {"initial_iteration_value": ["e", 0]}},
             "b": {"class_type": "X", "inputs": {"v": ["s2", 4], "w": ["e", 0]}},
             "e2": {"class_type": "EndLoop", "inputs": {"output_value": ["b", 0]}}}
    view = PromptView(nodes)
    assert view.partner("e") == "s" and view.body("s", "e") == ["a"]
    assert view.partner("e2") == "s2" and view.body("s2", "e2") == ["b"]
    with pytest.raises(LoopStructureError):
        PromptView({"e": {"class_type": "EndLoop", "inputs": {}}}).partner("e")


async def test_cached_loop_runs_again_when_its_body_changes(runner):
    await runner.run(carried_concat(True, cache=True), prompt_id="a")
    changed = carried_concat(True, cache=True)
    changed["cat"]["inputs"]["string_b"] = "-"
    out = await runner.run(changed, prompt_id="b")
    assert out.status == "success", out.error
    assert out.ui_outputs["out"] == {"text": ["x-", "x--", "x---"]} and len(copies(runner, "cat")) == 3


async def test_an_end_loop_without_its_start_is_an_error(runner):
    prompt = {"a": node("PrimitiveString", value="v"), "e": node("EndLoop", output_value=["a", 0], accumulate=False),
              "out": node("PreviewAny", source=["e", 0])}
    out = await runner.run(prompt)
    assert out.status == "error" and "Start Loop" in str(out.error)


async def test_accumulate_from_a_link(runner):
    prompt = carried_concat(False, flag=node("PrimitiveBoolean", value=True))
    prompt["e"]["inputs"]["accumulate"] = ["flag", 0]
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    assert out.ui_outputs["out"] == {"text": ["x+", "x++", "x+++"]}


async def test_progress_text_on_the_start_loop_node(runner):
    prompt = carried_concat(True)
    checked = await runner.validate(prompt)
    events = []
    out = await runner.executor.execute(prompt, "progress", outputs=checked.outputs, sink=events.append)
    assert out.status == "success", out.error
    texts = [e.data for e in events if e.type == 3]
    assert [t[4 + 1:].decode() for t in texts] == ["Iteration 0 / 3", "Iteration 1 / 3", "Iteration 2 / 3",
                                                  "Iteration 3 / 3"]
    assert all(t[4:5] == b"s" for t in texts)  # shown on the Start Loop node "s"
