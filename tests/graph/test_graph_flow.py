"""Lazy inputs, node expansion, ExecutionBlocker and list mapping."""
from __future__ import annotations

from graph.executor import Executor
from tests.graph.helpers import node, ran, run_prompt


def lazy_prompt(switch: bool) -> dict:
    return {"t": node("IntConst", value=1), "f": node("IntConst", value=2),
            "t2": node("Add", a=["t", 0], b=10), "f2": node("Add", a=["f", 0], b=20),
            "s": node("LazySwitch", switch=switch, on_true=["t2", 0], on_false=["f2", 0]),
            "out": node("FloatSink", value=["s", 0])}


async def test_lazy_switch_evaluates_one_branch(registry, calls, recorder):
    out = await run_prompt(Executor(registry), lazy_prompt(True), sink=recorder)
    assert out.ui_outputs["out"] == {"value": [11]}
    assert [kw["value"] for kw in ran(calls, "IntConst")] == [1]
    checks = ran(calls, "LazySwitch.check")
    assert [c["on_true"] for c in checks] == [None, 11]
    assert [e["node"] for e in recorder.of("executing")].count("s") == 2  # announced again when restaged


async def test_lazy_inputs_requested_one_after_another(registry, calls):
    prompt = {"a": node("IntConst", value=1), "b": node("IntConst", value=2), "l": node("LazyBoth", a=["a", 0], b=["b", 0]),
              "o": node("FloatSink", value=["l", 0])}
    out = await run_prompt(Executor(registry), prompt)
    assert out.ui_outputs["o"] == {"value": [3]}
    assert [(c["a"], c["b"]) for c in ran(calls, "LazyBoth.check")] == [(None, None), (1, None), (1, 2)]


async def test_async_check_lazy_status_is_awaited(registry, calls):
    prompt = {"a": node("IntConst", value=4), "l": node("AsyncLazy", a=["a", 0]), "o": node("FloatSink", value=["l", 0])}
    out = await run_prompt(Executor(registry), prompt)
    assert out.ui_outputs["o"] == {"value": [8]}
    assert [c["a"] for c in ran(calls, "AsyncLazy.check")] == [None, 4]


async def test_lazy_request_for_unconnected_input_is_an_error(registry):
    prompt = {"a": node("IntConst", value=1), "l": node("LazyAsksUnconnected", a=["a", 0]),
              "o": node("FloatSink", value=["l", 0])}
    out = await run_prompt(Executor(registry), prompt)
    assert out.status == "error" and out.error["exception_type"] == "graph.errors.NodeInputError"
    assert "no input to that node at all" in out.error["exception_message"]


async def test_lazy_request_for_a_constant_is_ignored(registry):
    prompt = {"l": node("LazyBoth", a=1, b=2), "o": node("FloatSink", value=["l", 0])}
    out = await run_prompt(Executor(registry), prompt)
    assert out.ui_outputs["o"] == {"value": [3]}


async def test_expansion_ids_are_deterministic_and_cached(registry, calls, recorder):
    executor = Executor(registry)
    prompt = {"1": node("IntConst", value=5), "4": node("Repeat", value=["1", 0], count=3, step=10),
              "5": node("FloatSink", value=["4", 0])}
    out = await run_prompt(executor, prompt, sink=recorder)
    assert out.ui_outputs["5"] == {"value": [35]}
    assert out.executed == ["1", "4.0.0.1", "4.0.0.2", "4.0.0.3", "4", "5"]
    expanded = [e for e in recorder.of("executing") if e["node"].startswith("4.")]
    assert {e["display_node"] for e in expanded} == {"4"}
    state = recorder.of("progress_state")[-1]["nodes"]["4.0.0.1"]
    assert state["parent_node_id"] == "4" and state["real_node_id"] == "4" and state["display_node_id"] == "4"
    calls.clear()
    again = await run_prompt(executor, prompt)
    assert again.executed == [] and calls == []


async def test_expanded_output_nodes_run_with_meta(registry):
    prompt = {"1": node("IntConst", value=5), "2": node("ExpandCollect", value=["1", 0]),
              "3": node("FloatSink", value=["2", 0])}
    out = await run_prompt(Executor(registry), prompt)
    assert out.ui_outputs["2.0.0.1"] == {"values": [5]}
    assert out.meta["2.0.0.1"] == {"node_id": "2.0.0.1", "display_node": "2", "parent_node": "2", "real_node_id": "2"}


async def test_mixed_plain_and_expanded_returns_across_list_calls(registry):
    prompt = {"m": node("MakeList", count=4), "x": node("MixedExpand", value=["m", 0]),
              "c": node("ListCollect", value=["x", 0], tag="")}
    out = await run_prompt(Executor(registry), prompt)
    assert out.ui_outputs["c"]["values"] == [0, 101, 2, 103]
    assert {"x.1.0.1", "x.3.0.1"} <= set(out.executed)  # ids carry the list index


async def test_async_node_that_expands_keeps_its_ui(registry, recorder):
    prompt = {"1": node("IntConst", value=1), "e": node("AsyncExpand", value=["1", 0]),
              "o": node("FloatSink", value=["e", 0])}
    executor = Executor(registry)
    out = await run_prompt(executor, prompt, sink=recorder)
    assert out.ui_outputs == {"e": {"expanded": [1]}, "o": {"value": [1001]}}
    again = await run_prompt(executor, prompt)
    assert again.executed == [] and again.ui_outputs["o"] == {"value": [1001]}


async def test_tail_recursive_loop(registry):
    prompt = {"l": node("Loop", value=0, remaining=4), "o": node("FloatSink", value=["l", 0])}
    out = await run_prompt(Executor(registry), prompt)
    assert out.ui_outputs["o"] == {"value": [4]}
    assert "l.0.0.2.0.0.2" in out.executed  # nested deterministic ids


async def test_cycle_created_by_expansion_is_blamed_on_the_expander(registry):
    prompt = {"1": node("IntConst", value=1), "c": node("ExpandCycle", value=["1", 0]), "o": node("FloatSink", value=["c", 0])}
    out = await run_prompt(Executor(registry), prompt)
    assert out.status == "error"
    assert out.error["exception_type"] == "graph.DependencyCycleError" and out.error["node_id"] == "c"
    assert out.error["exception_message"] == "Dependency cycle detected"


async def test_expansion_with_an_existing_id_is_an_error(registry):
    prompt = {"1": node("IntConst", value=1), "d": node("ExpandDuplicate", value=["1", 0], existing="1"),
              "o": node("FloatSink", value=["d", 0])}
    out = await run_prompt(Executor(registry), prompt)
    assert out.error["exception_type"] == "graph.errors.DuplicateNodeError"


async def test_raw_link_receives_the_link(registry, calls):
    prompt = {"1": node("IntConst", value=1), "r": node("RawLink", value=["1", 0]), "o": node("FloatSink", value=["r", 0])}
    out = await run_prompt(Executor(registry), prompt)
    assert ran(calls, "RawLink") == [{"value": ["1", 0]}]
    assert out.ui_outputs["o"] == {"value": [101]}


async def test_before_node_call_hooks_get_the_prefix(registry):
    seen = []
    executor = Executor(registry, before_node_call=[lambda uid, call, graph: seen.append((uid, call, graph))])
    prompt = {"m": node("MakeList", count=2), "a": node("Add", a=["m", 0], b=1), "o": node("FloatSink", value=["a", 0])}
    await run_prompt(executor, prompt)
    assert seen == [("m", 0, 0), ("a", 0, 0), ("a", 1, 0), ("o", 0, 0), ("o", 1, 0)]


async def test_silent_blocker_skips_consumers(registry, calls, recorder):
    prompt = {"1": node("IntConst", value=1), "g": node("Gate", value=["1", 0], mode="block"),
              "c": node("ListCollect", value=["g", 0], tag="x")}
    out = await run_prompt(Executor(registry), prompt, sink=recorder)
    assert out.status == "success" and ran(calls, "ListCollect") == []
    assert "execution_error" not in recorder.types()


async def test_blocker_with_message_reports_and_continues(registry, calls, recorder):
    prompt = {"1": node("IntConst", value=1), "g": node("Gate", value=["1", 0], mode="block_message"),
              "a": node("Add", a=["g", 0], b=1), "c": node("ListCollect", value=["a", 0], tag="x"),
              "ok": node("FloatSink", value=["1", 0])}
    out = await run_prompt(Executor(registry), prompt, "p1", sink=recorder)
    assert out.status == "success" and out.ui_outputs["ok"] == {"value": [1]}
    [err] = recorder.of("execution_error")  # only the first consumer reports; downstream is silent
    assert err == {"prompt_id": "p1", "node_id": "a", "node_type": "Add", "executed": err["executed"],
                   "exception_message": "Execution Blocked: gate closed", "exception_type": "ExecutionBlocked",
                   "traceback": [], "current_inputs": [], "current_outputs": []}
    assert "execution_error" not in [m[0] for m in out.messages]
    assert ran(calls, "Add") == [] and ran(calls, "ListCollect") == []


async def test_blocker_per_list_element(registry, calls):
    prompt = {"m": node("MakeList", count=5), "g": node("GateEven", value=["m", 0]),
              "c": node("ListCollect", value=["g", 0], tag="t")}
    out = await run_prompt(Executor(registry), prompt)
    assert out.ui_outputs["c"] == {"values": [0, 2, 4], "tags": ["t", "t", "t"]}


async def test_list_mapping_and_ui_merge(registry, calls):
    prompt = {"m": node("MakeList", count=3), "a": node("Add", a=["m", 0], b=10),
              "c": node("ListCollect", value=["a", 0], tag="x")}
    out = await run_prompt(Executor(registry), prompt)
    assert [(kw["a"], kw["b"]) for kw in ran(calls, "Add")] == [(0, 10), (1, 10), (2, 10)]
    assert out.ui_outputs["c"] == {"values": [10, 11, 12], "tags": ["x", "x", "x"]}


async def test_shorter_lists_repeat_their_last_item(registry, calls):
    prompt = {"m3": node("MakeList", count=3), "m2": node("MakeList", count=2),
              "a": node("Add", a=["m3", 0], b=["m2", 0]), "c": node("ListCollect", value=["a", 0], tag="")}
    await run_prompt(Executor(registry), prompt)
    assert [(kw["a"], kw["b"]) for kw in ran(calls, "Add")] == [(0, 0), (1, 1), (2, 1)]


async def test_input_is_list_gets_whole_lists(registry, calls):
    prompt = {"m": node("MakeList", count=3), "s": node("SumList", values=["m", 0], offset=5),
              "n": node("SumList", values=["m", 1], offset=0), "c": node("ListCollect", value=["s", 0], tag=""),
              "d": node("ListCollect", value=["n", 0], tag="")}
    out = await run_prompt(Executor(registry), prompt)
    assert {"values": [0, 1, 2], "offset": [5]} in ran(calls, "SumList")
    assert out.ui_outputs["c"]["values"] == [8]
    assert out.ui_outputs["d"]["values"] == [3]  # the non-list output is one value
