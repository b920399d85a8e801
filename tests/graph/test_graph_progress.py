"""progress_state pacing (graph/progress.py): ComfyUI's full-map stream, coalesced per interval.

Deterministic: a fake clock and a fake `call_later` drive the coalescer; nothing sleeps.
"""
from __future__ import annotations

import json

import pytest

from graph.events import PROGRESS_STATE, Event
from graph.progress import ProgressCoalescer, ProgressPacing, ProgressState
from graph.prompt import DynamicPrompt


class FakeLoop:
    """`call_later` and a clock that only move when the test says so."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[FakeTimer] = []

    def clock(self) -> float:
        return self.now

    def call_later(self, delay: float, fn) -> "FakeTimer":
        timer = FakeTimer(self.now + max(0.0, delay), fn)
        self.timers.append(timer)
        return timer

    def advance_to(self, when: float) -> None:
        """Fire every due timer in time order, then set the clock to `when`."""
        while True:
            due = sorted((t for t in self.timers if not t.cancelled and t.at <= when), key=lambda t: t.at)
            if not due:
                break
            timer = due[0]
            self.timers.remove(timer)
            self.now = max(self.now, timer.at)
            timer.fn()
        self.now = max(self.now, when)


class FakeTimer:
    def __init__(self, at: float, fn) -> None:
        self.at, self.fn, self.cancelled = at, fn, False

    def cancel(self) -> None:
        self.cancelled = True


def chain_prompt(n: int) -> dict:
    prompt = {"1": {"class_type": "Const", "inputs": {"value": 1}}}
    for i in range(2, n + 1):
        prompt[str(i)] = {"class_type": "Add", "inputs": {"a": [str(i - 1), 0], "b": 1}}
    return prompt


def event(nodes: dict, prompt_id: str = "p") -> Event:
    return Event(PROGRESS_STATE, {"prompt_id": prompt_id, "nodes": nodes})


def entry_count(events: list[Event]) -> int:
    return sum(len(e.data["nodes"]) for e in events)


def byte_count(events: list[Event]) -> int:
    return sum(len(json.dumps(e.as_message())) for e in events)


def simulate_chain(n: int, seconds_per_change: float, pacing: ProgressPacing = ProgressPacing()):
    """Run ProgressState through a chain of `n` nodes (start, finish each), one change every
    `seconds_per_change`, into a coalescer that is flushed at the end (as the server does before
    `execution_success`); each map sent is checked to be the latest change so far. Returns (unbatched events, (send time, event) sent, loop, changes as
    (time, event))."""
    loop = FakeLoop()
    sent: list[tuple[float, Event]] = []
    unbatched: list[Event] = []
    changes: list[tuple[float, Event]] = []

    def send(e: Event) -> None:
        # A map sent is always the latest change made so far (never a stale one).
        assert e is changes[-1][1]
        sent.append((loop.now, e))

    coalescer = ProgressCoalescer(send, loop.call_later, clock=loop.clock, pacing=pacing)

    def emit(e: Event) -> None:
        unbatched.append(e)
        changes.append((loop.now, e))
        coalescer.push(e)

    state = ProgressState("p", DynamicPrompt(chain_prompt(n)), emit)
    t = 0.0
    for i in range(1, n + 1):
        for step in (state.start, state.finish):
            loop.advance_to(t)
            step(str(i))
            t += seconds_per_change
    loop.advance_to(t)
    coalescer.flush()
    return unbatched, sent, loop, changes


def test_the_first_change_goes_out_at_once_and_the_latest_of_the_rest_after_the_interval():
    loop = FakeLoop()
    sent: list[Event] = []
    coalescer = ProgressCoalescer(sent.append, loop.call_later, clock=loop.clock)
    a, b, c = event({"1": "a"}), event({"1": "b"}), event({"1": "c"})
    coalescer.push(a)
    assert sent == [a]
    loop.advance_to(0.001)
    coalescer.push(b)
    coalescer.push(c)
    assert sent == [a]  # held: the frontend would only apply the latest one anyway
    loop.advance_to(1 / 60 - 1e-6)
    assert sent == [a]
    loop.advance_to(1 / 60)
    assert sent == [a, c]  # latest wins
    loop.advance_to(10.0)
    assert sent == [a, c]  # nothing held, nothing sent


def test_flush_sends_the_held_map_now_and_cancels_the_timer():
    loop = FakeLoop()
    sent: list[Event] = []
    coalescer = ProgressCoalescer(sent.append, loop.call_later, clock=loop.clock)
    a, b = event({"1": "a"}), event({"1": "b"})
    coalescer.push(a)
    coalescer.push(b)
    coalescer.flush()
    assert sent == [a, b]
    coalescer.flush()
    loop.advance_to(1.0)
    assert sent == [a, b]


def test_after_close_every_event_passes_straight_through():
    loop = FakeLoop()
    sent: list[Event] = []
    coalescer = ProgressCoalescer(sent.append, loop.call_later, clock=loop.clock)
    a, b, c = event({"1": "a"}), event({"1": "b"}), event({"1": "c"})
    coalescer.push(a)
    coalescer.push(b)
    coalescer.close()
    coalescer.push(c)
    assert sent == [a, b, c]


def test_maps_of_different_prompts_never_replace_each_other():
    loop = FakeLoop()
    sent: list[Event] = []
    coalescer = ProgressCoalescer(sent.append, loop.call_later, clock=loop.clock)
    a, b, c = event({"1": "a"}, "p1"), event({"1": "b"}, "p1"), event({"1": "c"}, "p2")
    for e in (a, b, c):
        coalescer.push(e)
    coalescer.flush()
    assert sent == [a, b, c]


def test_the_interval_is_one_frame_for_small_maps_and_grows_with_big_ones():
    pacing = ProgressPacing()
    assert pacing.interval(0) == pacing.interval(100) == 1 / 60
    assert pacing.interval(10000) == pytest.approx(0.2)


@pytest.mark.parametrize("seconds_per_change", [0.0, 50e-6, 1e-3])
def test_the_client_ends_with_the_unbatched_final_map_and_every_map_sent_is_current(seconds_per_change):
    unbatched, sent, _loop, changes = simulate_chain(300, seconds_per_change)
    assert sent[-1][1].data == unbatched[-1].data
    assert {e["state"] for e in sent[-1][1].data["nodes"].values()} == {"finished"}
    # And every change reaches the client within one interval of the map before it.
    longest = ProgressPacing().interval(300)
    sends = [(when, unbatched.index(e)) for when, e in sent]
    for index, (when, _e) in enumerate(changes):
        assert any(when <= t <= when + longest + 1e-9 and i >= index for t, i in sends), (index, when)


@pytest.mark.parametrize("seconds_per_change", [0.0, 50e-6, 1e-3])
def test_progress_bytes_are_linear_in_the_node_count(seconds_per_change):
    pacing = ProgressPacing()
    totals = {}
    for n in (100, 1000):
        unbatched, sent, loop, _changes = simulate_chain(n, seconds_per_change, pacing)
        events = [e for _t, e in sent]
        # What ComfyUI sends: every non-pending node on each start and finish.
        assert len(unbatched) == 2 * n and entry_count(unbatched) == n * (n + 1)
        # The bound from the pacing: one interval of at least entries * seconds_per_entry after
        # each map, plus the leading map and the final flush.
        assert entry_count(events) <= loop.now / pacing.seconds_per_entry + 2 * n
        totals[n] = (entry_count(events), byte_count(events), len(events))
    (e100, b100, m100), (e1000, b1000, m1000) = totals[100], totals[1000]
    per_node = 2 * (1 + seconds_per_change / pacing.seconds_per_entry)  # entries per node, from the bound
    assert e100 <= per_node * 100 and e1000 <= per_node * 1000
    entry_bytes = len(json.dumps(unbatched[-1].data["nodes"])) / 1000  # the largest entries are the last ones
    for n, (entries, size, messages) in totals.items():
        assert size <= entries * entry_bytes * 1.01 + messages * 100
    if seconds_per_change == 0.0:
        # Instant nodes: the leading map and the final one, whatever the size.
        assert m100 == m1000 == 2 and e100 == 1 + 100 and e1000 == 1 + 1000
        assert b1000 < 11 * b100


def test_unbatched_progress_bytes_are_quadratic_for_comparison():
    """The same chains without the coalescer (ComfyUI): the ratio of bytes is ~N^2."""
    sizes = {}
    for n in (100, 1000):
        events: list[Event] = []
        state = ProgressState("p", DynamicPrompt(chain_prompt(n)), events.append)
        for i in range(1, n + 1):
            state.start(str(i))
            state.finish(str(i))
        sizes[n] = byte_count(events)
    assert sizes[1000] > 90 * sizes[100]


def eager_maps(steps) -> list[dict]:
    """What ComfyUI's handler sends: a copy of the whole map after each change."""
    maps, live = [], {}
    for node_id, state, value, total in steps:
        live[node_id] = (state, value, total)
        maps.append({n: {"state": s, "value": v, "max": m} for n, (s, v, m) in live.items()})
    return maps


def test_each_map_shows_the_state_at_its_event_whenever_it_is_read():
    events: list[Event] = []
    state = ProgressState("p", DynamicPrompt(chain_prompt(40)), events.append)
    steps = []
    for i in range(1, 41):
        node_id = str(i)
        state.start(node_id)
        steps.append((node_id, "running", 0.0, 1.0))
        for value in range(1, 4):
            state.update(node_id, value, 3)
            steps.append((node_id, "running", value, 3))
        state.finish(node_id)
        steps.append((node_id, "finished", 3, 3))
        if i == 20:
            assert events[-5].data["nodes"]  # one read in the middle, the others after the run
    expected = eager_maps(steps)
    assert len(events) == len(expected)
    for event, want in reversed(list(zip(events, expected))):
        nodes = event.data["nodes"]
        assert list(nodes) == list(want)
        assert {n: {k: e[k] for k in ("state", "value", "max")} for n, e in nodes.items()} == want
        assert all(e["node_id"] == n and e["prompt_id"] == "p" for n, e in nodes.items())
        assert event.data["prompt_id"] == "p" and event.type == PROGRESS_STATE


def test_a_lazy_map_event_is_the_same_event_as_an_eager_one():
    events: list[Event] = []
    state = ProgressState("p", DynamicPrompt(chain_prompt(2)), events.append)
    state.start("1")
    lazy = events[0]
    eager = Event(PROGRESS_STATE, {"prompt_id": "p", "nodes": {"1": dict(lazy.data["nodes"]["1"])}})
    assert lazy == eager and eager == lazy and not (lazy != eager)
    assert json.dumps(lazy.as_message()) == json.dumps(eager.as_message())
    assert lazy.data is lazy.data  # built once
    state.finish("1")
    assert events[1] != lazy and events[0].data["nodes"]["1"]["state"] == "running"


def test_only_the_maps_the_coalescer_sends_are_ever_built():
    unbatched, sent, _loop, _changes = simulate_chain(1000, 0.0)
    assert len(sent) == 2  # the leading map and the final one
    # pacing reads the map's size, not the map: nothing is built until the receiver reads it
    # (the server never does for a client without a socket; issue 34)
    assert sum(e.is_built for e in unbatched) == 0
    assert [e.entries for _t, e in sent] == [1, 1000]
    for _t, event in sent:
        assert len(event.data["nodes"]) == event.entries
    assert [e for e in unbatched if e.is_built] == [e for _t, e in sent]


def test_the_active_scope_still_sends_plain_small_maps():
    events: list[Event] = []
    state = ProgressState("p", DynamicPrompt(chain_prompt(3)), events.append, scope="active")
    for node_id in ("1", "2"):
        state.start(node_id)
        state.finish(node_id)
    assert [list(e.data["nodes"]) for e in events] == [["1"], ["1"], ["2"], ["2"]]
