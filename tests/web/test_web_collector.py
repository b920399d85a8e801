"""The cyclic collector's full passes run at a prompt worker's quiet points, not in the middle of a
big prompt (web/collector.py, issue 34). Deterministic: a fake clock; nothing is timed."""
from __future__ import annotations

import asyncio
import gc
import weakref

import pytest

from tests.web.web_harness import chain, start_test_server
from web import collector
from web.collector import NEVER, CollectorPacing, note_big_input, release_in_pieces


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Node:
    """A container that can be part of a reference cycle and be watched by a weak reference."""

    def __init__(self) -> None:
        self.other = None


def _garbage_cycle_in_the_oldest_generation() -> weakref.ref:
    a, b = Node(), Node()
    a.other, b.other = b, a
    gc.collect(1)  # survives the young generations: promoted to the oldest
    gc.collect(1)
    watch = weakref.ref(a)
    del a, b  # now unreachable, in the generation only a full pass looks at
    gc.collect(1)
    assert watch() is not None  # young passes do not find it
    return watch


def _grow() -> list:
    """Objects that survive: the oldest generation grows by a half once young passes promote them."""
    return [[] for _ in range(len(gc.get_objects(generation=2)) // 2 + 1000)]


def _young_passes(count: int) -> None:
    for _ in range(count):
        gc.collect(1)  # each counts as one more young pass since the last full one


async def test_while_started_no_full_pass_is_automatic_and_the_last_stop_puts_the_thresholds_back():
    before = gc.get_threshold()
    first, second = CollectorPacing(lambda: False), CollectorPacing(lambda: False)
    first.start()
    second.start()
    try:
        assert gc.get_threshold() == (before[0], before[1], NEVER)
        first.stop()
        assert gc.get_threshold()[2] == NEVER  # the other worker still serves
    finally:
        first.stop()
        second.stop()
    assert gc.get_threshold() == before


async def test_a_due_full_pass_runs_at_a_quiet_point_and_not_before():
    clock = Clock()
    pacing = CollectorPacing(lambda: False, min_interval_s=10.0, min_young_passes=3, clock=clock)
    pacing.start()
    try:
        watch = _garbage_cycle_in_the_oldest_generation()
        _young_passes(3)
        clock.now += 5.0
        assert not pacing.quiet_point() and watch() is not None  # too soon after the last
        clock.now += 5.0
        assert pacing.quiet_point() and watch() is None and pacing.collections == 1
        assert not pacing.quiet_point()  # just ran: not due
        clock.now += 60.0
        assert not pacing.quiet_point()  # nothing promoted since (no young passes)
        _young_passes(3)
        assert not pacing.quiet_point()  # the oldest generation has not grown by a quarter
        grown = _grow()
        _young_passes(3)
        assert pacing.quiet_point() and pacing.collections == 2
        del grown
    finally:
        pacing.stop()


async def _read_big_body(handled: asyncio.Event | None = None) -> None:
    """A request handler that reads a big body, then (until `handled` is set) validates it."""
    note_big_input()
    if handled is not None:
        await handled.wait()


async def test_the_timer_waits_for_the_running_prompt_and_a_big_body_up_to_max_defer(monkeypatch):
    clock, busy = Clock(), [True]
    pacing = CollectorPacing(lambda: busy[0], min_interval_s=1.0, min_young_passes=1, idle_check_s=1000.0,
                             max_defer_s=30.0, clock=clock)
    pacing.start()
    try:
        _young_passes(2)
        clock.now += 5.0
        pacing._on_timer()
        assert pacing.collections == 0  # a prompt runs: waits
        clock.now += 30.0
        pacing._on_timer()
        assert pacing.collections == 1  # waited max_defer_s: runs anyway
        grown = _grow()
        _young_passes(2)
        clock.now += 5.0
        busy[0] = False
        monkeypatch.setattr(collector, "_last_big_input", float("-inf"))  # (put back after the test)
        await asyncio.create_task(_read_big_body())  # a big body was read, by a request now answered
        pacing._on_timer()
        assert not pacing.quiet_point() and pacing.collections == 1
        monkeypatch.setattr(collector, "_last_big_input", collector._last_big_input - 1000.0)  # long ago
        pacing._on_timer()
        assert pacing.collections == 2  # idle: runs when due
        del grown
    finally:
        pacing.stop()


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        CollectorPacing(lambda: False, idle_check_s=0)
    with pytest.raises(ValueError):
        CollectorPacing(lambda: False, min_interval_s=60.0, max_defer_s=10.0)


async def test_the_server_collects_after_a_stored_prompt_and_restores_the_collector_when_it_stops(tmp_path):
    before = gc.get_threshold()
    server = await start_test_server(tmp_path)
    try:
        assert gc.get_threshold()[2] == NEVER
        collector = server.state.worker.collector
        collector.min_interval_s = 0.0
        collector.min_young_passes = 1
        watch = _garbage_cycle_in_the_oldest_generation()
        _young_passes(1)
        status, body = await server.post_prompt(chain(7))
        assert status == 200
        await server.wait_history(body["prompt_id"])
        for _ in range(200):  # the pass follows the stored entry on the worker's task
            if collector.collections:
                break
            await asyncio.sleep(0.01)
        assert collector.collections >= 1 and watch() is None
        # the prompt's data was taken apart in a worker thread: nothing else held it any more
        taken = await server.state.worker.releasing
        assert taken >= 2 * len(chain(7))  # at least each node's dict and its inputs dict
    finally:
        await server.close()
        await server.state.worker.stop()
    assert gc.get_threshold() == before


def test_release_in_pieces_takes_apart_only_what_nothing_else_holds():
    shared = {"kept": [1, 2, {"deep": [3]}]}
    holder = [{"a": [{"b": i, "c": [i, "x"]} for i in range(50)], "shared": shared}, [[1], [2]], "text", 5]
    assert release_in_pieces(holder) == 1 + 1 + 50 * 2 + 1 + 2  # dict, its list, 50 x (dict, list), [[1], [2]]
    assert holder == [] and shared == {"kept": [1, 2, {"deep": [3]}]}  # held elsewhere: left whole


async def test_the_worker_counts_as_busy_while_a_prompts_data_is_being_taken_apart():
    from types import SimpleNamespace

    from web.worker import QueueWorker

    queue = SimpleNamespace(running=None)
    worker = QueueWorker(queue, hub=None, executor=None, store=None)
    assert not worker.collector.busy()
    worker.releasing = asyncio.get_running_loop().create_future()
    assert worker.collector.busy()  # a timed pass now would walk what is being freed
    worker.releasing.set_result(0)
    assert not worker.collector.busy()
    queue.running = object()
    assert worker.collector.busy()


class Walked:
    """Objects of a type of their own, kept in the oldest generation for a full pass to walk."""


async def test_a_quiet_point_pass_reports_what_it_walked(caplog):
    clock = Clock()
    pacing = CollectorPacing(lambda: False, min_interval_s=0.0, min_young_passes=0, clock=clock)
    pacing.start()
    try:
        kept = [Walked() for _ in range(3000)]
        watch = _garbage_cycle_in_the_oldest_generation()
        _young_passes(2)  # `kept` reaches the oldest generation too
        with caplog.at_level("DEBUG", logger="web.collector"):
            assert pacing.quiet_point()
        assert watch() is None
        last = pacing.last_pass
        assert last is not None and last.walked >= len(kept) and last.unreachable >= 2 and last.seconds >= 0
        assert "most walked: " in caplog.text  # at DEBUG, the types most walked are named
        assert collector._kinds([*kept[:3], [], Walked()]) == "Walked x 4, list x 1"
        del kept
    finally:
        pacing.stop()


async def test_no_pass_walks_a_big_body_while_its_request_is_handled_however_long(monkeypatch):
    clock = Clock()
    pacing = CollectorPacing(lambda: False, min_interval_s=1.0, min_young_passes=0, idle_check_s=15.0,
                             max_defer_s=120.0, clock=clock)
    pacing.start()
    handled = asyncio.Event()
    request = asyncio.create_task(_read_big_body(handled))
    try:
        await asyncio.sleep(0)  # the body is read; parsing, validation and storage go on
        monkeypatch.setattr(collector, "_last_big_input", collector._last_big_input - 60.0)  # read 60 s ago
        clock.now += 60.0
        assert collector.big_input_in_hand()
        pacing._on_timer()
        assert not pacing.quiet_point() and pacing.collections == 0  # still in the request's hands
        clock.now += 60.0  # max_defer_s since the last pass: a request that never ends holds no longer
        assert pacing.quiet_point() and pacing.collections == 1
        clock.now += 10.0
        _grow_and_promote = _grow()
        _young_passes(2)
        assert not pacing.quiet_point()
        handled.set()
        await request  # answered: the body is the queue's (or garbage) now
        assert not collector.big_input_in_hand()
        assert pacing.quiet_point() and pacing.collections == 2
        del _grow_and_promote
    finally:
        handled.set()
        pacing.stop()
