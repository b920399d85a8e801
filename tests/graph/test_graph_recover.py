"""Executor(recover=...): a failing node call is retried once when the host's hook recovers."""
from __future__ import annotations

import pytest

from graph.context import Interrupted
from graph.executor import Executor
from graph.native import Input, Output, node as native_node
from graph.registry import Registry
from tests.graph.helpers import Flag, node, run_prompt


class OutOfMemory(RuntimeError):
    """What a device raises; the graph engine knows nothing about it."""


def make_registry(failures: list[BaseException], attempts: list[int]) -> Registry:
    """`Flaky` raises the queued failures one per call, then returns its input plus one."""

    @native_node("Flaky", inputs=[Input("value", "INT")], outputs=[Output("INT")])
    def flaky(value):
        attempts.append(value)
        if failures:
            raise failures.pop(0)
        return (value + 1,)

    @native_node("FlakyAsync", inputs=[Input("value", "INT")], outputs=[Output("INT")])
    async def flaky_async(value):
        attempts.append(value)
        if failures:
            raise failures.pop(0)
        return (value + 2,)

    @native_node("Show", inputs=[Input("value", "INT")], output_node=True)
    def show(value):
        return {"ui": {"values": [value]}}

    registry = Registry()
    for fn in (flaky, flaky_async, show):
        registry.add_native(fn)
    return registry


class Recorder:
    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.seen: list[BaseException] = []

    def __call__(self, exc: BaseException) -> bool:
        self.seen.append(exc)
        return self.answer and isinstance(exc, OutOfMemory)


def prompt(kind: str = "Flaky") -> dict:
    return {"1": node(kind, value=1), "2": node("Show", value=["1", 0])}


@pytest.mark.parametrize("kind, result", [("Flaky", 2), ("FlakyAsync", 3)])
async def test_a_recovered_failure_is_retried_once_and_succeeds(kind, result):
    attempts: list[int] = []
    oom = OutOfMemory("out of memory")
    recover = Recorder(True)
    executor = Executor(make_registry([oom], attempts), recover=recover)
    out = await run_prompt(executor, prompt(kind))
    assert out.status == "success", out.error
    assert out.ui_outputs == {"2": {"values": [result]}}
    assert attempts == [1, 1] and recover.seen == [oom]


async def test_a_second_failure_is_reported_without_a_third_attempt():
    attempts: list[int] = []
    recover = Recorder(True)
    executor = Executor(make_registry([OutOfMemory("first"), OutOfMemory("second")], attempts), recover=recover)
    out = await run_prompt(executor, prompt())
    assert out.status == "error"
    assert attempts == [1, 1] and [str(e) for e in recover.seen] == ["first"]
    assert out.error["node_id"] == "1" and out.error["exception_message"] == "second\n"
    assert out.error["exception_type"].endswith("OutOfMemory")


async def test_a_declined_failure_is_reported_at_once():
    attempts: list[int] = []
    recover = Recorder(False)
    executor = Executor(make_registry([ValueError("bad value")], attempts), recover=recover)
    out = await run_prompt(executor, prompt())
    assert out.status == "error" and out.error["exception_message"] == "bad value\n"
    assert attempts == [1] and len(recover.seen) == 1


async def test_without_a_hook_nothing_is_retried():
    attempts: list[int] = []
    out = await run_prompt(Executor(make_registry([OutOfMemory("oom")], attempts)), prompt())
    assert out.status == "error" and attempts == [1]


async def test_a_failing_hook_reports_the_node_error():
    attempts: list[int] = []

    def broken(exc: BaseException) -> bool:
        raise RuntimeError("hook broke")

    out = await run_prompt(Executor(make_registry([OutOfMemory("oom")], attempts), recover=broken), prompt())
    assert out.status == "error" and out.error["exception_message"] == "oom\n" and attempts == [1]


async def test_interrupts_are_never_offered_to_the_hook():
    attempts: list[int] = []
    recover = Recorder(True)
    executor = Executor(make_registry([Interrupted("stop")], attempts), recover=recover)
    out = await run_prompt(executor, prompt(), interrupt=Flag())
    assert out.status == "interrupted" and attempts == [1] and recover.seen == []


def test_recover_must_be_callable():
    with pytest.raises(TypeError, match="recover"):
        Executor(Registry(), recover=True)
