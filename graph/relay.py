"""Handing a prompt's events from its worker thread to the caller's event loop.

The prompt runs on its own thread and event loop (as in ComfyUI, where every prompt runs under
`asyncio.run` on the worker thread), so sync node code never blocks the server's loop. Events are
appended under a lock and delivered on the caller's loop in batches, order preserved.

Coalescing: waking another thread's loop costs a write to its self-pipe plus a loop iteration
on both sides, which for trivial nodes (three or four events each) used to be most of the
executor's time. The first event of a batch therefore wakes the caller's loop, which delivers
the batch `delay` seconds later (2 ms by default: far below what a person or a progress bar can
see), so a fast prompt costs one wake-up per `delay` instead of one per event. `flush()`
delivers what is queued at once; `flush_then(callback)` delivers it in batches, one per loop
turn, then calls back: the executor resolves `execute()` that way, so the sink has seen every
event by then and a big prompt's backlog never holds the loop in one callback.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from typing import Any, Callable

log = logging.getLogger(__name__)

DEFAULT_DELAY_S = 0.002
MAX_BATCH = 256  # events delivered per loop callback


class EventRelay:
    def __init__(self, loop: asyncio.AbstractEventLoop, sink: Callable[[Any], Any], *,
                 delay: float = DEFAULT_DELAY_S) -> None:
        if delay < 0:
            raise ValueError(f"EventRelay delay must be >= 0 seconds, got {delay}")
        self._loop = loop
        self._sink = sink
        self._delay = delay
        self._lock = threading.Lock()
        self._pending: deque[Any] = deque()
        self._scheduled = False
        self._tasks: set[asyncio.Future] = set()

    def put(self, event: Any) -> None:
        """Queue an event (any thread)."""
        with self._lock:
            self._pending.append(event)
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._arm)
        except RuntimeError:  # the caller's loop is closed: nobody is listening any more
            log.warning("event loop closed; dropping prompt events")

    def _arm(self) -> None:
        """On the caller's loop: deliver this batch after the coalescing delay."""
        if self._delay:
            self._loop.call_later(self._delay, self._deliver_some)
        else:
            self._deliver_some()

    def _deliver_some(self) -> None:
        """Deliver at most `MAX_BATCH` queued events, then let the loop serve others before the
        rest: a prompt of 100 000 trivial nodes queues thousands between two deliveries, and
        handling them in one callback kept every request waiting (issue 34). Order is kept."""
        with self._lock:
            # taken from the front: slicing off the rest copied the whole backlog on every
            # batch, quadratic in a big prompt's events
            pending = self._pending
            batch = [pending.popleft() for _ in range(min(MAX_BATCH, len(pending)))]
            rest = bool(pending)
            if not rest:
                self._scheduled = False
        self._deliver(batch)
        if rest:
            self._loop.call_soon(self._deliver_some)

    def flush_then(self, callback: Callable[[], Any]) -> None:
        """Deliver every queued event, `MAX_BATCH` per loop turn as `_deliver_some` does, then
        call `callback()` (on the caller's loop; the run has ended, so the queue only shrinks)."""
        with self._lock:
            pending = self._pending
            batch = [pending.popleft() for _ in range(min(MAX_BATCH, len(pending)))]
            rest = bool(pending)
        self._deliver(batch)
        if rest:
            self._loop.call_soon(self.flush_then, callback)
        else:
            callback()

    def flush(self) -> None:
        """Deliver every queued event now (on the caller's loop)."""
        with self._lock:
            batch, self._pending = list(self._pending), deque()
            self._scheduled = False
        self._deliver(batch)

    def _deliver(self, batch: list) -> None:
        for event in batch:
            try:
                result = self._sink(event)
            except Exception:  # noqa: BLE001 -- a broken consumer must not stop the prompt
                log.exception("event sink failed on %s", getattr(event, "type", event))
                continue
            if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
                task = asyncio.ensure_future(result)
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
