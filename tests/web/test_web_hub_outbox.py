"""A client's outbox (web/hub.py, issue 34): a client that reads, however slowly, gets every
message that no newer one superseded, in order; only a client that has stopped reading loses
messages past the limit. The reader's pace is driven by the test (a semaphore), and time by a fake
clock: no sleeps."""
from __future__ import annotations

import asyncio
import json
import logging

from graph.events import Event
from graph.progress import ProgressState
from graph.prompt import DynamicPrompt
from web.hub import Outbox, WebSocketHub


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class SlowSocket:
    """A socket whose reader takes one message per `allow()`; `wait_sent(n)` waits for n sends."""

    closed = False

    def __init__(self) -> None:
        self.sent: list[str] = []
        self._allowance = asyncio.Semaphore(0)
        self._changed = asyncio.Condition()

    async def send_str(self, text: str) -> None:
        await self._allowance.acquire()
        self.sent.append(text)
        async with self._changed:
            self._changed.notify_all()

    async def send_bytes(self, data: bytes) -> None:
        await self.send_str(data.hex())

    def allow(self, n: int = 1) -> None:
        for _ in range(n):
            self._allowance.release()

    async def wait_sent(self, n: int) -> None:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: len(self.sent) >= n), 10)

    def messages(self) -> list[tuple[str, dict]]:
        return [(m["type"], m["data"]) for m in map(json.loads, self.sent)]


def _hub(clock: Clock, **limits) -> WebSocketHub:
    hub = WebSocketHub(lambda: {"exec_info": {"queue_remaining": 0}}, clock=clock, **limits)
    hub.attach(asyncio.get_running_loop())
    return hub


async def _connected(hub: WebSocketHub, client: str) -> SlowSocket:
    """A socket whose writer has taken the greeting and waits for its reader."""
    ws = SlowSocket()
    conn = hub.connect(client, ws)  # type: ignore[arg-type]
    while len(conn.outbox):  # the writer task takes the greeting on its first turn
        await asyncio.sleep(0)
    return ws


async def test_a_slow_reader_gets_every_message_not_superseded_in_order(caplog):
    clock = Clock()
    hub = _hub(clock, outbox_limit=8, coalesce_backlog=4, stall_seconds=5)
    ws = await _connected(hub, "slow")

    def send(kind: str, **data) -> None:
        hub.send(kind, {"prompt_id": "p", **data}, "slow")

    send("executing", node="1")
    send("progress", node="1", value=1, max=4)
    send("progress", node="1", value=2, max=4)  # 3 queued: below the backlog, kept
    send("progress_state", nodes={"1": "A"})
    send("progress", node="1", value=3, max=4)  # 4 queued: supersedes value 2 (only progress between)
    send("progress_state", nodes={"1": "B"})  # supersedes map A
    send("executed", node="1", output={})
    send("progress", node="1", value=4, max=4)  # after `executed`: supersedes nothing
    send("executing", node="2")
    with caplog.at_level(logging.WARNING, logger="web.hub"):
        # far past the limit, but the reader takes a message every 4 s (< stall_seconds)
        for n in range(3, 40):
            send("executing", node=str(n))
            if n % 4 == 0:
                ws.allow()
                await ws.wait_sent(n // 4)
                clock.now += 4
        ws.allow(1000)
        await ws.wait_sent(1 + 7 + 37)
    assert "not reading" not in caplog.text
    got = ws.messages()
    assert got[0][0] == "status"
    assert [(k, d.get("node"), d.get("value"), d.get("nodes")) for k, d in got[1:8]] == [
        ("executing", "1", None, None), ("progress", "1", 1, None), ("progress", "1", 3, None),
        ("progress_state", None, None, {"1": "B"}), ("executed", "1", None, None),
        ("progress", "1", 4, None), ("executing", "2", None, None)]
    assert [d["node"] for _, d in got[8:]] == [str(n) for n in range(3, 40)]
    assert len(got) == 1 + 7 + 37


async def test_a_client_that_keeps_up_gets_every_progress_message():
    clock = Clock()
    hub = _hub(clock, outbox_limit=100, coalesce_backlog=64)
    ws = await _connected(hub, "quick")
    for value in range(5):
        hub.send("progress", {"prompt_id": "p", "node": "1", "value": value, "max": 5}, "quick")
        hub.send("progress_state", {"prompt_id": "p", "nodes": {"1": value}}, "quick")
    ws.allow(100)
    await ws.wait_sent(11)
    got = ws.messages()[1:]
    assert [d["value"] for k, d in got if k == "progress"] == [0, 1, 2, 3, 4]
    assert [d["nodes"]["1"] for k, d in got if k == "progress_state"] == [0, 1, 2, 3, 4]


async def test_a_superseded_lazy_map_is_never_built():
    clock = Clock()
    hub = _hub(clock, coalesce_backlog=1)
    ws = await _connected(hub, "c")
    events: list[Event] = []
    prompt = {str(i): {"class_type": "X", "inputs": {}} for i in range(1, 6)}
    state = ProgressState("p", DynamicPrompt(prompt), events.append)
    for i in range(1, 6):
        state.start(str(i))
        hub.send_event(events[-1], "c")
        hub.send("executing", {"node": str(i), "prompt_id": "p"}, "c")
    ws.allow(100)
    await ws.wait_sent(1 + 5 + 1)
    # the writer was still sending the greeting: each map superseded the one queued before it
    assert [e.is_built for e in events] == [False, False, False, False, True]
    maps = [d["nodes"] for k, d in ws.messages() if k == "progress_state"]
    assert [sorted(m) for m in maps] == [["1", "2", "3", "4", "5"]]
    assert [d["node"] for k, d in ws.messages() if k == "executing"] == ["1", "2", "3", "4", "5"]


async def test_a_client_that_stopped_reading_loses_messages_past_the_limit(caplog):
    clock = Clock()
    hub = _hub(clock, outbox_limit=4, stall_seconds=5)
    ws = await _connected(hub, "gone")
    for n in range(6):  # the writer stalled for no time yet: kept past the limit
        hub.send("executing", {"node": str(n), "prompt_id": "p"}, "gone")
    clock.now = 6  # nothing sent for 6 s > stall_seconds
    with caplog.at_level(logging.WARNING, logger="web.hub"):
        for n in range(6, 9):
            hub.send("executing", {"node": str(n), "prompt_id": "p"}, "gone")
    assert hub.clients["gone"].outbox.dropped == 3
    assert caplog.text.count("is not reading") == 1  # one line, not one per message
    ws.allow(100)
    await ws.wait_sent(7)
    clock.now = 7
    hub.send("executing", {"node": "9", "prompt_id": "p"}, "gone")  # reading again: delivered
    await ws.wait_sent(8)
    assert [d.get("node") for _, d in ws.messages()[1:]] == ["0", "1", "2", "3", "4", "5", "9"]


async def test_the_hard_limit_bounds_even_a_reading_client():
    box = Outbox(2, hard_limit=4, clock=lambda: 0.0)
    assert [box.put(str(n)) for n in range(6)] == [True, True, True, True, False, False]
    assert box.take_all() == ["0", "1", "2", "3"] and len(box) == 0


async def test_progress_of_another_prompt_or_node_is_never_superseded():
    box = Outbox(100, coalesce_backlog=0, clock=lambda: 0.0)
    box.put("a", ("progress", "p", "1"))
    box.put("b", ("progress", "p", "2"))
    box.put("c", ("progress", "q", "1"))
    box.put("d", ("progress_state", "q"))
    box.put("e", ("progress_state", "p"))
    box.put("f", ("progress", "p", "1"))  # supersedes a (only progress messages between)
    box.put("g", ("progress_state", "q"))  # supersedes d
    assert box.take_all() == ["b", "c", "e", "f", "g"]
