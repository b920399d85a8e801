"""Handing a prompt's events from its worker thread to the caller's event loop.

The prompt runs on its own thread and event loop (as in ComfyUI, where every prompt runs under
`asyncio.run` on the worker thread), so sync node code never blocks the server's loop. Events are
appended under a lock and delivered on the caller's loop in batches: one wake-up per batch,
order preserved.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, Callable

log = logging.getLogger(__name__)


class EventRelay:
    def __init__(self, loop: asyncio.AbstractEventLoop, sink: Callable[[Any], Any]) -> None:
        self._loop = loop
        self._sink = sink
        self._lock = threading.Lock()
        self._pending: list[Any] = []
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
            self._loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the caller's loop is closed: nobody is listening any more
            log.warning("event loop closed; dropping prompt events")

    def _drain(self) -> None:
        with self._lock:
            batch, self._pending = self._pending, []
            self._scheduled = False
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
