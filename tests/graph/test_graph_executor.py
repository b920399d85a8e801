"""Executor: ordering, events, outcome, hidden inputs, errors, interrupts, progress, threads, async."""
from __future__ import annotations

import asyncio
import threading

import pytest

from graph.context import current
from graph.errors import GraphError
from graph.executor import Executor
from graph.native import Input, Output, node as native_node
from graph.registry import Registry
from tests.graph.helpers import Flag, node, ran, run_prompt


def chain():
    return {"1": node("IntConst", value=5), "2": node("Add", a=["1", 0], b=3),
            "3": node("Collect", value=["2", 0]), "9": node("IntConst", value=99)}


async def test_runs_only_needed_nodes_and_returns_ui(registry, calls, recorder):
    out = await run_prompt(Executor(registry), chain(), "p1", sink=recorder)
    assert out.status == "success" and out.error is None
    assert out.ui_outputs == {"3": {"values": [8]}}
    assert out.meta == {"3": {"node_id": "3", "display_node": "3", "parent_node": None, "real_node_id": "3"}}
    assert out.executed == ["1", "2", "3"]
    assert [kw["value"] for kw in ran(calls, "IntConst")] == [5]  # node 9 is not needed


async def test_event_sequence_and_fields(registry, calls, recorder):
    out = await run_prompt(Executor(registry), chain(), "p1", sink=recorder)
    types = [t for t in recorder.types() if t != "progress_state"]
    assert types == ["execution_start", "execution_cached", "executing", "executing", "executing", "executed",
                     "execution_success"]
    start, cached = recorder.of("execution_start")[0], recorder.of("execution_cached")[0]
    assert start["prompt_id"] == "p1" and isinstance(start["timestamp"], int)
    assert cached["nodes"] == [] and cached["prompt_id"] == "p1"
    assert recorder.of("executing")[0] == {"node": "1", "display_node": "1", "prompt_id": "p1"}
    assert recorder.of("executed")[0] == {"node": "3", "display_node": "3", "output": {"values": [8]},
                                          "prompt_id": "p1"}
    assert [m[0] for m in out.messages] == ["execution_start", "execution_cached", "execution_success"]
    assert all("timestamp" in m[1] for m in out.messages)


async def test_progress_state_tracks_running_and_finished(registry, calls, recorder):
    await run_prompt(Executor(registry), chain(), "p1", sink=recorder)
    states = recorder.of("progress_state")
    first = states[0]["nodes"]["1"]
    assert first == {"value": 0.0, "max": 1.0, "state": "running", "node_id": "1", "prompt_id": "p1",
                     "display_node_id": "1", "parent_node_id": None, "real_node_id": "1"}
    last = states[-1]["nodes"]
    assert {n: e["state"] for n, e in last.items()} == {"1": "finished", "2": "finished", "3": "finished"}
    assert "9" not in last


async def test_fully_cached_rerun_replays_output_ui(registry, calls, recorder):
    executor = Executor(registry)
    await run_prompt(executor, chain(), "p1")
    calls.clear()
    out = await run_prompt(executor, chain(), "p2", sink=recorder)
    assert calls == [] and out.executed == []
    assert recorder.of("execution_cached")[0]["nodes"] == ["1", "2", "3"]  # 9 never ran
    assert "executing" not in recorder.types()
    assert recorder.of("executed") == [{"node": "3", "display_node": "3", "output": {"values": [8]},
                                        "prompt_id": "p2"}]
    assert out.ui_outputs == {"3": {"values": [8]}}


async def test_changing_a_root_constant_reruns_downstream_only(registry, calls):
    executor = Executor(registry)
    prompt = {"1": node("IntConst", value=5), "2": node("Add", a=["1", 0], b=3), "3": node("Collect", value=["2", 0]),
              "4": node("IntConst", value=7), "5": node("Collect", value=["4", 0])}
    await run_prompt(executor, prompt)
    calls.clear()
    prompt["2"]["inputs"]["b"] = 4
    out = await run_prompt(executor, prompt)
    assert out.executed == ["2", "3"] and out.ui_outputs["3"] == {"values": [9]}


async def test_renumbered_and_duplicated_subgraphs_hit_the_cache(registry, calls):
    # FloatSink has no hidden UNIQUE_ID (Collect has one, which puts its id in the key).
    executor = Executor(registry)
    first = {"1": node("IntConst", value=5), "2": node("Add", a=["1", 0], b=3), "3": node("FloatSink", value=["2", 0])}
    await run_prompt(executor, first)
    renumbered = {"a": node("IntConst", value=5), "b": node("Add", a=["a", 0], b=3), "c": node("FloatSink", value=["b", 0])}
    out = await run_prompt(executor, renumbered)
    assert out.executed == [] and out.ui_outputs == {"c": {"value": [8]}}

    fresh = Executor(registry)
    twice = {"1": node("IntConst", value=2), "2": node("FloatSink", value=["1", 0]),
             "3": node("IntConst", value=2), "4": node("FloatSink", value=["3", 0])}
    out = await run_prompt(fresh, twice)
    assert len(out.executed) == 2  # the second identical chain is a cache hit within the prompt
    assert out.ui_outputs == {"2": {"value": [2]}, "4": {"value": [2]}}
    with_id = {"1": node("IntConst", value=2), "2": node("Collect", value=["1", 0]), "3": node("Collect", value=["1", 0])}
    out = await run_prompt(fresh, with_id)
    assert out.executed == ["2", "3"]  # hidden UNIQUE_ID keys by id


async def test_not_idempotent_nodes_are_keyed_by_id(registry, calls):
    prompt = {"1": node("IntConst", value=1), "2": node("Counter", value=["1", 0]), "3": node("Counter", value=["1", 0]),
              "4": node("Collect", value=["2", 0]), "5": node("Collect", value=["3", 0])}
    out = await run_prompt(Executor(registry), prompt)
    assert len(ran(calls, "Counter")) == 2 and {"2", "3"} <= set(out.executed)


async def test_instances_are_reused_per_node_id_and_class(registry, calls):
    executor = Executor(registry)
    prompt = {"1": node("IntConst", value=1), "2": node("Changing", value=["1", 0]),
              "3": node("Counter", value=["2", 0]), "4": node("Collect", value=["3", 0])}
    await run_prompt(executor, prompt)
    await run_prompt(executor, prompt)
    counters = ran(calls, "Counter")
    assert [c["count"] for c in counters] == [1, 2] and counters[0]["instance"] == counters[1]["instance"]
    assert len(ran(calls, "Changing")) == 2 and len(ran(calls, "IntConst")) == 1  # NaN: downstream re-runs
    renamed = {"1": prompt["1"], "2": prompt["2"], "7": prompt["3"], "4": node("Collect", value=["7", 0])}
    await run_prompt(executor, renamed)
    assert ran(calls, "Counter")[-1]["count"] == 1  # a new id gets a new instance


async def test_is_changed_sees_constants_only_and_controls_reruns(registry, calls):
    from tests.graph.packs.testing_pack.nodes_basic import Fingerprint
    Fingerprint.seen = []
    Fingerprint.token = "a"
    executor = Executor(registry)
    prompt = {"1": node("IntConst", value=1), "2": node("Fingerprint", value=["1", 0], salt="s"),
              "3": node("Collect", value=["2", 0])}
    await run_prompt(executor, prompt)
    await run_prompt(executor, prompt)
    assert len(ran(calls, "Fingerprint")) == 1 and Fingerprint.seen[0] == (None, "s")
    Fingerprint.token = "b"
    await run_prompt(executor, prompt)
    assert len(ran(calls, "Fingerprint")) == 2


async def test_is_changed_exception_means_always_rerun(registry, calls):
    executor = Executor(registry)
    prompt = {"1": node("IntConst", value=1), "2": node("BadFingerprint", value=["1", 0]),
              "3": node("Collect", value=["2", 0])}
    await run_prompt(executor, prompt)
    await run_prompt(executor, prompt)
    assert len(ran(calls, "BadFingerprint")) == 2 and len(ran(calls, "IntConst")) == 1


async def test_async_is_changed_is_awaited(registry, calls):
    executor = Executor(registry)
    prompt = {"1": node("AsyncValidate", value=3), "2": node("Collect", value=["1", 0])}
    await run_prompt(executor, prompt)
    out = await run_prompt(executor, prompt)
    assert out.executed == []


async def test_hidden_inputs(registry, calls):
    prompt = {"h": {"class_type": "Hidden", "inputs": {}}}
    await run_prompt(Executor(registry), prompt, extra_data={"extra_pnginfo": {"workflow": 1}})
    [kw] = ran(calls, "Hidden")
    assert kw["prompt"] is not None and kw["prompt"]["h"]["class_type"] == "Hidden"
    assert kw["dynprompt"].get_node("h")["class_type"] == "Hidden"
    assert kw["extra_pnginfo"] == {"workflow": 1} and kw["unique_id"] == "h"


async def test_undeclared_linked_inputs_become_kwargs(registry, calls):
    prompt = {"1": node("IntConst", value=2), "2": node("IntConst", value=3),
              "3": node("Variadic", first=["1", 0], second=["2", 0], third=["2", 0], junk=5),
              "4": node("Collect", value=["3", 0])}
    out = await run_prompt(Executor(registry), prompt)
    assert ran(calls, "Variadic") == [{"first": 2, "others": ["second", "third"]}]
    assert out.ui_outputs["4"] == {"values": [8]}


async def test_node_error_reports_and_keeps_partial_cache(registry, calls, recorder):
    executor = Executor(registry)
    prompt = {"1": node("IntConst", value=4), "2": node("Add", a=["1", 0], b=1), "3": node("Fail", value=["2", 0]),
              "4": node("Collect", value=["3", 0])}
    out = await run_prompt(executor, prompt, "p1", sink=recorder)
    assert out.status == "error"
    err = out.error
    assert err["node_id"] == "3" and err["node_type"] == "Fail" and err["prompt_id"] == "p1"
    assert err["exception_message"] == "failing on purpose with 5\n" and err["exception_type"] == "ValueError"
    assert err["traceback"] and all(isinstance(line, str) for line in err["traceback"])
    assert err["current_inputs"] == {"value": [5]} and err["executed"] == ["1", "2"]
    assert err["current_outputs"] == [] and isinstance(err["timestamp"], int)
    assert out.messages[-1] == ("execution_error", err)
    assert "execution_success" not in recorder.types()
    calls.clear()
    prompt["3"] = node("Add", a=["2", 0], b=0)
    out = await run_prompt(executor, prompt)
    assert out.executed == ["3", "4"]  # resumed after the computed part


async def test_unserialisable_inputs_are_formatted(registry):
    @native_node("TakesObject", inputs=[Input("x", "*")], outputs=[Output("INT")])
    def takes_object(x):
        raise RuntimeError("no")

    @native_node("MakeObject", outputs=[Output("OBJ")])
    def make_object():
        return (object(),)

    @native_node("Sink", inputs=[Input("x", "INT")], output_node=True)
    def sink(x):
        return {"ui": {}}

    reg = Registry()
    for fn in (takes_object, make_object, sink):
        reg.add_native(fn)
    prompt = {"1": node("MakeObject"), "2": node("TakesObject", x=["1", 0]), "3": node("Sink", x=["2", 0])}
    out = await run_prompt(Executor(reg), prompt)
    assert out.error["current_inputs"]["x"][0].startswith("<object object")


async def test_interrupt_before_the_next_node(registry, calls, recorder):
    flag = Flag(True)
    out = await run_prompt(Executor(registry), chain(), "p1", sink=recorder, interrupt=flag)
    assert out.status == "interrupted" and calls == []
    data = recorder.of("execution_interrupted")[0]
    assert data == {"prompt_id": "p1", "node_id": "1", "node_type": "IntConst", "executed": [],
                    "timestamp": data["timestamp"]}
    assert out.messages[-1][0] == "execution_interrupted"


async def test_interrupt_at_a_progress_tick(recorder):
    flag = Flag()
    after = []

    @native_node("Stops", output_node=True)
    def stops():
        ctx = current()
        ctx.progress(1, 3)
        flag.set()  # as if /interrupt arrived during the node
        ctx.progress(2, 3)
        after.append("not reached")
        return {"ui": {}}

    reg = Registry()
    reg.add_native(stops)
    out = await run_prompt(Executor(reg), {"s": node("Stops")}, sink=recorder, interrupt=flag)
    assert out.status == "interrupted" and out.error["node_id"] == "s" and after == []
    assert len(recorder.of("progress")) == 1


async def test_progress_events(registry, recorder):
    prompt = {"1": node("Progress", steps=2), "2": node("Collect", value=["1", 0])}
    await run_prompt(Executor(registry), prompt, "p1", sink=recorder)
    assert recorder.of("progress") == [{"value": 1, "max": 2, "prompt_id": "p1", "node": "1"},
                                       {"value": 2, "max": 2, "prompt_id": "p1", "node": "1"}]
    running = [s["nodes"]["1"] for s in recorder.of("progress_state") if s["nodes"]["1"]["state"] == "running"]
    assert [(e["value"], e["max"]) for e in running] == [(0.0, 1.0), (1, 2), (2, 2)]


async def test_preview_and_custom_events_from_node_context(recorder):
    image = object()

    @native_node("Previewer", output_node=True)
    def previewer():
        ctx = current()
        ctx.progress(1, 4, ("JPEG", image, 512))
        ctx.send("my.event", {"x": 1})
        return {"ui": {"done": [True]}}

    reg = Registry()
    reg.add_native(previewer)
    await run_prompt(Executor(reg), {"n": node("Previewer")}, "p1", sink=recorder)
    [preview] = recorder.of("preview")
    assert preview == {"image": image, "format": "JPEG", "max_size": 512, "prompt_id": "p1", "node_id": "n",
                       "display_node_id": "n", "parent_node_id": None, "real_node_id": "n"}
    assert recorder.of("my.event") == [{"x": 1}]
    types = recorder.types()
    assert types.index("progress") < types.index("preview") < types.index("my.event")


async def test_sync_nodes_run_off_the_event_loop(recorder):
    loop_thread = threading.get_ident()
    ticked = threading.Event()
    seen = {}

    @native_node("Blocking", output_node=True)
    def blocking():
        seen["thread"] = threading.get_ident()
        seen["context"] = current().node_id
        # Waits for a task on the event loop: this only works if the loop is not blocked.
        seen["loop_ran"] = ticked.wait(timeout=10)
        return {"ui": {}}

    async def ticker():
        await asyncio.sleep(0.01)
        ticked.set()

    reg = Registry()
    reg.add_native(blocking)
    task = asyncio.create_task(ticker())
    await run_prompt(Executor(reg), {"b": node("Blocking")})
    await task
    assert seen == {"thread": seen["thread"], "context": "b", "loop_ran": True}
    assert seen["thread"] != loop_thread


async def test_independent_async_nodes_run_concurrently(registry, calls):
    prompt = {"1": node("AsyncWait", value=1, seconds=0.05), "2": node("AsyncWait", value=2, seconds=0.05),
              "3": node("Collect", value=["1", 0]), "4": node("Collect", value=["2", 0])}
    out = await run_prompt(Executor(registry), prompt)
    assert out.status == "success"
    order = [name for name, _ in calls if name.startswith("AsyncWait")]
    assert order[:2] == ["AsyncWait.start", "AsyncWait.start"]
    assert out.ui_outputs == {"3": {"values": [1]}, "4": {"values": [2]}}


async def test_async_node_failure(registry):
    prompt = {"1": node("AsyncFail", value=1), "2": node("Collect", value=["1", 0])}
    out = await run_prompt(Executor(registry), prompt)
    assert out.status == "error" and out.error["exception_type"] == "RuntimeError"
    assert out.error["node_id"] == "1"


async def test_outputs_must_be_prompt_nodes(registry):
    executor = Executor(registry)
    with pytest.raises(GraphError, match="not nodes"):
        await executor.execute(chain(), "p", outputs=["nope"])


async def test_async_sink_is_awaited(registry):
    received = []

    async def sink(event):
        received.append(event.type)

    await run_prompt(Executor(registry), chain(), sink=sink)
    await asyncio.sleep(0)
    assert "execution_success" in received


async def test_bad_return_value_is_a_clear_error():
    @native_node("ReturnsInt", outputs=[Output("INT")])
    def returns_int():
        return 5

    @native_node("S", inputs=[Input("x", "INT")], output_node=True)
    def s(x):
        return {"ui": {}}

    reg = Registry()
    reg.add_native(returns_int)
    reg.add_native(s)
    out = await run_prompt(Executor(reg), {"1": node("ReturnsInt"), "2": node("S", x=["1", 0])})
    assert out.error["exception_type"] == "graph.errors.NodeOutputError"
    assert "returned int; expected a tuple of 1" in out.error["exception_message"]


async def test_progress_state_active_scope_lists_running_and_changed_nodes(registry, recorder):
    out = await run_prompt(Executor(registry, progress_state="active"), chain(), "p1", sink=recorder)
    assert out.status == "success"
    states = [s["nodes"] for s in recorder.of("progress_state")]
    assert [sorted(n) for n in states] == [["1"], ["1"], ["2"], ["2"], ["3"], ["3"]]
    assert states[1]["1"]["state"] == "finished"
    with pytest.raises(ValueError, match="progress_state"):
        Executor(registry, progress_state="some")


async def test_one_prompt_at_a_time_and_cancellation_stops_the_run(recorder):
    started, release = threading.Event(), threading.Event()
    later = []

    @native_node("Slow", outputs=[Output("INT")])
    def slow():
        started.set()
        release.wait(timeout=10)
        return (1,)

    @native_node("After", inputs=[Input("x", "INT")], output_node=True)
    def after(x):
        later.append(x)
        return {"ui": {}}

    reg = Registry()
    reg.add_native(slow)
    reg.add_native(after)
    executor = Executor(reg)
    prompt = {"1": node("Slow"), "2": node("After", x=["1", 0])}
    task = asyncio.create_task(executor.execute(prompt, "p1", outputs=["2"], sink=recorder))
    while not started.is_set():
        await asyncio.sleep(0.005)
    with pytest.raises(GraphError, match="already running"):
        await executor.execute(prompt, "p2", outputs=["2"])
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    while executor.busy:
        await asyncio.sleep(0.005)
    assert later == []  # the node after the cancelled point never ran
    out = await executor.execute(prompt, "p3", outputs=["2"])
    assert out.status == "success" and later == [1]


async def test_nodes_that_failed_validation_do_not_disturb_the_run(registry):
    from graph.validation import validate_prompt

    prompt = {"1": node("IntConst", value=1), "2": node("FloatSink", value=["1", 0]),
              "3": {"class_type": "Fingerprint", "inputs": ["not", "a", "dict"]}, "4": node("FloatSink", value=["3", 0]),
              "5": node("FloatSink", value=["99", 0])}
    result = await validate_prompt(prompt, registry)
    assert result.ok and result.outputs == ["2"]
    out = await Executor(registry).execute(prompt, "p", outputs=result.outputs)
    assert out.status == "success" and out.ui_outputs == {"2": {"value": [1]}}


async def test_a_failing_sink_does_not_stop_the_prompt(registry, caplog):
    def sink(event):
        raise RuntimeError("consumer broke")

    out = await run_prompt(Executor(registry), chain(), sink=sink)
    assert out.status == "success" and "event sink failed" in caplog.text
