"""The relay's end-of-prompt flush (graph/relay.py `flush_then`): every queued event in order, in
batches of at most MAX_BATCH with the loop free between them, and only then the callback."""
from __future__ import annotations

import asyncio

from graph.relay import MAX_BATCH, EventRelay


async def test_flush_then_delivers_the_backlog_in_batches_and_calls_back_after_the_last():
    loop = asyncio.get_running_loop()
    seen: list[int] = []
    turns: list[int] = []  # how many events had been delivered each time another callback ran
    relay = EventRelay(loop, seen.append, delay=3600)  # nothing is delivered unless flushed
    for n in range(3 * MAX_BATCH + 5):
        relay.put(n)
    done = loop.create_future()

    def other_callback() -> None:  # what the loop also serves meanwhile (a request, a socket)
        turns.append(len(seen))
        if not done.done():
            loop.call_soon(other_callback)

    loop.call_soon(other_callback)
    relay.flush_then(lambda: done.set_result(len(seen)))
    assert len(seen) == MAX_BATCH  # the first batch at once, the rest on later turns
    assert await done == 3 * MAX_BATCH + 5 and seen == list(range(3 * MAX_BATCH + 5))
    assert any(0 < t < 3 * MAX_BATCH + 5 for t in turns)  # the loop ran other callbacks in between
