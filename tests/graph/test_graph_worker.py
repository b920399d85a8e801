"""The prompt thread (graph/worker.py) and event coalescing (graph/relay.py)."""
from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest

from graph.executor import Executor
from graph.native import Int, node as native_node
from graph.registry import Registry
from graph.relay import EventRelay
from graph.worker import PromptWorker
from tests.graph.helpers import node, run_prompt

marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="unset")


def thread_registry(seen: list) -> Registry:
    @native_node("WhereAmI", inputs=[Int("n")], output_node=True)
    def where_am_i(n):
        seen.append((threading.get_ident(), marker.get()))
        return {"ui": {}}

    reg = Registry()
    reg.add_native(where_am_i)
    return reg


async def test_prompts_share_one_worker_thread_off_the_callers_loop():
    seen: list = []
    executor = Executor(thread_registry(seen))
    marker.set("first")
    await run_prompt(executor, {"1": node("WhereAmI", n=1)}, "p1")
    marker.set("second")
    await run_prompt(executor, {"1": node("WhereAmI", n=2)}, "p2")
    (t1, m1), (t2, m2) = seen
    assert t1 == t2 != threading.get_ident()
    assert (m1, m2) == ("first", "second")  # each prompt sees the caller's context of that moment
    executor.close()


async def _wait_until(predicate, timeout: float = 10.0) -> bool:
    for _ in range(int(timeout / 0.01)):
        if predicate():
            return True
        await asyncio.sleep(0.01)
    return predicate()


async def test_worker_stops_when_idle_or_closed_and_restarts_on_demand():
    worker = PromptWorker("test-worker", idle_s=0.05)
    loop = asyncio.get_running_loop()

    def submit(value: int) -> asyncio.Future:
        future = loop.create_future()

        async def job() -> int:
            return value * 2

        worker.submit(job(), contextvars.copy_context(),
                      lambda result, error: loop.call_soon_threadsafe(future.set_result, (result, error)))
        return future

    assert not worker.alive
    assert await submit(21) == (42, None)
    assert await _wait_until(lambda: not worker.alive)  # idle: the thread went away
    assert await submit(5) == (10, None)  # and comes back for the next prompt
    worker.close()
    assert await _wait_until(lambda: not worker.alive)
    with pytest.raises(ValueError, match="idle_s"):
        PromptWorker("bad", idle_s=0)


async def test_background_tasks_a_node_leaves_are_cancelled_when_its_prompt_ends():
    cancelled = threading.Event()

    async def forgotten() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    @native_node("Spawner", output_node=True)
    async def spawner():
        asyncio.get_running_loop().create_task(forgotten())
        await asyncio.sleep(0)
        return {"ui": {}}

    reg = Registry()
    reg.add_native(spawner)
    executor = Executor(reg)
    out = await run_prompt(executor, {"1": node("Spawner")})
    assert out.status == "success" and cancelled.is_set()  # as asyncio.run would at the end
    executor.close()


async def test_a_failing_run_is_reported_to_the_caller():
    worker = PromptWorker("test-worker")
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    async def job() -> None:
        raise KeyError("boom")

    worker.submit(job(), contextvars.copy_context(),
                  lambda result, error: loop.call_soon_threadsafe(future.set_result, (result, error)))
    result, error = await future
    assert result is None and isinstance(error, KeyError)
    worker.close()


async def test_relay_coalesces_events_and_flush_delivers_them_in_order():
    received: list[int] = []
    relay = EventRelay(asyncio.get_running_loop(), received.append, delay=3600)
    producer = threading.Thread(target=lambda: [relay.put(i) for i in range(100)])
    producer.start()
    producer.join()
    await asyncio.sleep(0.05)
    assert received == []  # waiting for the batch's delay: one wake-up for all of them
    relay.flush()
    assert received == list(range(100))
    with pytest.raises(ValueError, match="delay"):
        EventRelay(asyncio.get_running_loop(), received.append, delay=-1)


async def test_relay_delivers_after_its_delay_without_a_flush():
    received: list[int] = []
    relay = EventRelay(asyncio.get_running_loop(), received.append, delay=0.001)
    threading.Thread(target=lambda: [relay.put(i) for i in range(3)]).start()
    assert await _wait_until(lambda: received == [0, 1, 2])
