"""One node step alone (graph/node_step.py), on a `Run` built without an `Executor`.

The step runs the node and reports what it produced; it changes nothing in the run (no stored
outputs, no schedule links, no added nodes): applying the result is the run's job.
"""
from __future__ import annotations

from graph.cache import CacheConfig, CacheEntry, make_cache
from graph.context import Interrupted
from graph.errors import DuplicateNodeError
from graph.node_step import FAILURE, PENDING, SUCCESS, execute_node
from graph.objects import ObjectCache
from graph.run import Run
from graph.settings import RunSettings
from tests.graph.helpers import Flag, node


async def standalone(registry, prompt: dict, events: list, interrupt: Flag | None = None) -> Run:
    run = Run(RunSettings(registry), make_cache(CacheConfig()), ObjectCache(), prompt, "p",
              extra_data={}, emit=events.append, interrupt=interrupt or Flag())
    await run.signatures.prepare(prompt)  # what Run.run does first (IS_CHANGED)
    return run


def untouched(run: Run) -> None:
    assert len(run.cache) == 0 and run.executed == {} and run.ui_outputs == {}
    assert run.schedule.is_empty() and run.dynprompt.ephemeral_prompt == {}
    assert all(run.record(n).entry is None for n in run.dynprompt)


async def test_a_step_returns_the_outputs_and_leaves_the_run_as_it_was(registry, calls):
    events: list = []
    run = await standalone(registry, {"1": node("IntConst", value=5)}, events)
    step = await execute_node(run, "1")
    assert step.status == SUCCESS and step.entry.outputs == [[5]] and step.error is None
    assert [kw for name, kw in calls] == [{"value": 5}]
    assert [e.type for e in events] == ["progress_state", "executing", "progress_state"]
    assert events[-1].data["nodes"]["1"]["state"] == "finished"
    untouched(run)


async def test_a_step_reads_its_producers_from_the_output_cache(registry, calls):
    events: list = []
    run = await standalone(registry, {"1": node("IntConst", value=5), "2": node("Add", a=["1", 0], b=3)}, events)
    run.cache.set(run.sig("1"), CacheEntry([[5]]))
    step = await execute_node(run, "2")
    assert step.status == SUCCESS and step.entry.outputs == [[8]]
    assert [name for name, _kw in calls] == ["Add"]


async def test_a_step_with_a_ui_output_reports_it_for_the_run_to_keep(registry, calls):
    events: list = []
    run = await standalone(registry, {"1": node("Collect", value=7)}, events)
    step = await execute_node(run, "1")
    assert step.status == SUCCESS
    assert step.ui == {"meta": {"node_id": "1", "display_node": "1", "parent_node": None, "real_node_id": "1"},
                       "output": {"values": [7]}}
    assert step.entry.ui == step.ui
    assert [e.data for e in events if e.type == "executed"] == [
        {"node": "1", "display_node": "1", "output": {"values": [7]}, "prompt_id": "p"}]
    untouched(run)


async def test_a_lazy_step_names_the_inputs_it_needs_without_linking_them(registry, calls):
    events: list = []
    prompt = {"1": node("IntConst", value=1), "2": node("IntConst", value=2),
              "3": node("LazySwitch", switch=True, on_true=["1", 0], on_false=["2", 0])}
    run = await standalone(registry, prompt, events)
    step = await execute_node(run, "3")
    assert step.status == PENDING and step.needs == ("on_true",)
    assert step.entry is None and step.expansion is None and step.waiting is None
    untouched(run)


async def test_an_expanding_step_plans_the_subgraph_without_adding_it(registry, calls):
    events: list = []
    run = await standalone(registry, {"1": node("Repeat", value=1, count=2, step=10)}, events)
    step = await execute_node(run, "1")
    assert step.status == PENDING and step.expansion is not None
    nodes = step.expansion.nodes
    assert [info["class_type"] for _id, info, _display in nodes] == ["Add", "Add"]
    assert all(display == "1" for _id, _info, display in nodes)
    assert step.expansion.outputs == ()
    assert step.expansion.links == ((nodes[-1][0], 0),)  # the result reads the last Add
    untouched(run)


async def test_a_failing_step_reports_comfyuis_error_details(registry, calls):
    events: list = []
    run = await standalone(registry, {"1": node("Fail", value=5)}, events)
    step = await execute_node(run, "1")
    assert step.status == FAILURE and isinstance(step.exception, ValueError)
    assert step.error["node_id"] == "1" and step.error["exception_type"] == "ValueError"
    assert step.error["exception_message"] == "failing on purpose with 5\n"
    assert step.error["current_inputs"] == {"value": [5]} and step.error["traceback"]
    untouched(run)


async def test_a_duplicate_expansion_id_fails_in_the_step(registry, calls):
    events: list = []
    prompt = {"1": node("IntConst", value=1), "2": node("ExpandDuplicate", value=["1", 0], existing="1")}
    run = await standalone(registry, prompt, events)
    run.cache.set(run.sig("1"), CacheEntry([[1]]))
    step = await execute_node(run, "2")
    assert step.status == FAILURE and isinstance(step.exception, DuplicateNodeError)
    assert run.dynprompt.ephemeral_prompt == {}


async def test_an_interrupted_step_fails_with_the_node_id_only(registry, calls):
    events: list = []
    run = await standalone(registry, {"1": node("IntConst", value=5)}, events, interrupt=Flag(True))
    step = await execute_node(run, "1")
    assert step.status == FAILURE and isinstance(step.exception, Interrupted)
    assert step.error == {"node_id": "1"} and calls == []
    untouched(run)
