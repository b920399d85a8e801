"""Executor(routes=...): a host's routes around whole prompts, node steps and node calls
(graph/settings.py `NodeRoutes`); what compat builds when a pack replaces ComfyUI's
`PromptExecutor.execute`, `execution.execute` / `_async_map_node_over_list`. Without routes, or with a provider answering None, nothing changes."""
from __future__ import annotations

import uuid

from graph.executor import Executor
from graph.native import Input, Output, node as native_node
from graph.node_step import StepResult
from graph.registry import Registry
from graph.settings import LAZY_CHECK, MAIN_CALL, NodeRoutes
from tests.graph.helpers import node, run_prompt


def make_registry(calls: list) -> Registry:
    @native_node("Numbers", inputs=[Input("count", "INT")], outputs=[Output("INT", is_list=True)])
    def numbers(count):
        return (list(range(count)),)

    @native_node("AddOne", inputs=[Input("value", "INT")], outputs=[Output("INT")])
    def add_one(value):
        calls.append(value)
        return (value + 1,)

    @native_node("Pick", inputs=[Input("a", "INT", lazy=True), Input("b", "INT", lazy=True)],
                 outputs=[Output("INT")], check_lazy_status=lambda a=None, b=None: ["a"])
    def pick(a=None, b=None):
        return (a,)

    @native_node("Show", inputs=[Input("value", "INT")], output_node=True)
    def show(value):
        return {"ui": {"values": [value]}}

    registry = Registry()
    for fn in (numbers, add_one, pick, show):
        registry.add_native(fn)
    return registry


PROMPT = {"1": node("Numbers", count=3), "2": node("AddOne", value=["1", 0]),
          "3": node("Pick", a=["2", 0], b=["4", 0]), "4": node("Numbers", count=1),
          "5": node("Show", value=["3", 0])}


async def test_routes_see_every_step_and_every_call_and_run_the_executors_own():
    calls: list = []
    steps: list = []
    sites: list = []

    async def step(view, node_id, run):
        steps.append((view.prompt_id, node_id))
        result = await run()
        assert isinstance(result, StepResult)
        return result

    async def call(site):
        sites.append((site.node_id, site.kind, {k: list(v) for k, v in site.values.items()}))
        returns = await site.run(site.values)
        if site.kind == MAIN_CALL:
            sites[-1] += (returns,)
        return returns

    asked = []
    executor = Executor(make_registry(calls), routes=lambda: asked.append(1) or NodeRoutes(step, call))
    prompt_id = str(uuid.uuid4())
    outcome = await run_prompt(executor, PROMPT, prompt_id)
    assert outcome.status == "success" and outcome.ui_outputs["5"] == {"values": [1, 2, 3]}
    assert asked == [1]  # once per prompt
    assert {n for _p, n in steps} == {"1", "2", "3", "5"} and all(p == prompt_id for p, _n in steps)
    main = {n: (values, returns) for n, kind, values, *rest in sites if kind == MAIN_CALL for returns in rest}
    assert main["2"] == ({"value": [0, 1, 2]}, [(1,), (2,), (3,)])
    assert [n for n, kind, _v in (s[:3] for s in sites) if kind == LAZY_CHECK] == ["3", "3"]
    assert calls == [0, 1, 2]


async def test_a_call_route_may_change_the_values_and_a_raising_route_fails_the_node():
    calls: list = []

    async def doubled(site):
        if site.node_id == "2":
            return await site.run({"value": [v * 10 for v in site.values["value"]]})
        return await site.run(site.values)

    executor = Executor(make_registry(calls), routes=lambda: NodeRoutes(calls=doubled))
    outcome = await run_prompt(executor, PROMPT, str(uuid.uuid4()))
    assert outcome.ui_outputs["5"] == {"values": [1, 11, 21]}

    async def refusing(view, node_id, run):
        if node_id == "2":
            raise RuntimeError("route refuses")
        return await run()

    executor = Executor(make_registry(calls), routes=lambda: NodeRoutes(step=refusing))
    outcome = await run_prompt(executor, PROMPT, str(uuid.uuid4()))
    assert outcome.status == "error" and outcome.error["node_id"] == "2"
    assert "route refuses" in outcome.error["exception_message"]


async def test_a_provider_answering_none_leaves_the_executor_unrouted():
    calls: list = []
    executor = Executor(make_registry(calls), routes=lambda: None)
    outcome = await run_prompt(executor, PROMPT, str(uuid.uuid4()))
    assert outcome.status == "success" and outcome.ui_outputs["5"] == {"values": [1, 2, 3]}


async def test_a_prompt_route_wraps_the_whole_run_and_must_answer_its_outcome():
    import pytest

    from graph.outcome import ExecutionOutcome

    calls: list = []
    seen: list = []

    async def around(view, outputs, run):
        seen.append((view.prompt_id, list(outputs), sorted(view.dynprompt.all_node_ids()), list(calls)))
        outcome = await run()
        seen.append(list(calls))
        return outcome

    executor = Executor(make_registry(calls), routes=lambda: NodeRoutes(prompt=around))
    prompt_id = str(uuid.uuid4())
    outcome = await run_prompt(executor, PROMPT, prompt_id)
    assert isinstance(outcome, ExecutionOutcome) and outcome.ui_outputs["5"] == {"values": [1, 2, 3]}
    assert seen == [(prompt_id, ["5"], ["1", "2", "3", "4", "5"], []), [0, 1, 2]]

    async def skipping(view, outputs, run):
        return ExecutionOutcome(status="success")  # a host may decide the prompt does not run

    executor = Executor(make_registry(calls), routes=lambda: NodeRoutes(prompt=skipping))
    outcome = await run_prompt(executor, PROMPT, str(uuid.uuid4()))
    assert outcome.executed == [] and calls == [0, 1, 2]

    async def confused(view, outputs, run):
        await run()
        return {"status": "success"}

    executor = Executor(make_registry(calls), routes=lambda: NodeRoutes(prompt=confused))
    with pytest.raises(TypeError, match="not an ExecutionOutcome"):
        await run_prompt(executor, PROMPT, str(uuid.uuid4()))
    assert not executor.busy
