"""The thread and event loop that an executor's prompts run on.

Like ComfyUI's prompt worker, prompts run off the caller's (server's) loop, so sync node code
never blocks it. Starting a thread and a fresh event loop for every prompt (what `asyncio.run`
on a new thread does) cost about a millisecond, more than a fully cached prompt of a hundred
nodes; so the thread and its loop are kept between prompts and stop after `idle_s` seconds
without work (or at `close()`), which keeps idle executors from holding threads.

Each prompt still starts clean, as under `asyncio.run`: its coroutine runs as a task in the
caller's copied context, and when it ends every other task still alive on the loop (a node's
forgotten background task) is cancelled and awaited before the result is handed back.
"""
from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
from typing import Any, Callable, Coroutine

log = logging.getLogger(__name__)

Done = Callable[[Any, "BaseException | None"], None]


class PromptWorker:
    """One worker thread with its own event loop; runs one prompt coroutine at a time."""

    def __init__(self, name: str, *, idle_s: float = 10.0) -> None:
        if idle_s <= 0:
            raise ValueError(f"PromptWorker idle_s must be > 0 seconds, got {idle_s}")
        self.name = name
        self.idle_s = idle_s
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._active = 0
        self._closing = False  # close() was called while a prompt ran: stop when it ends
        self._generation = 0  # bumped by every submit; an idle timer from before it is stale

    @property
    def alive(self) -> bool:
        """True while the thread (and its loop) are running."""
        return self._loop is not None

    def submit(self, coro: Coroutine[Any, Any, Any], context: contextvars.Context, done: Done) -> None:
        """Run `coro` on the worker loop inside `context`; then `done(result, error)` on that thread."""
        with self._lock:
            if self._loop is None:
                self._loop = self._start()
            self._active += 1
            self._generation += 1
            self._loop.call_soon_threadsafe(self._begin, coro, context, done)

    def close(self) -> None:
        """Stop the thread once no prompt runs (at once when idle)."""
        with self._lock:
            loop = self._loop
            if loop is None:
                return
            if self._active:
                self._closing = True
                return
            self._loop = None
        loop.call_soon_threadsafe(loop.stop)

    # -- on the worker thread -----------------------------------------------------------------
    def _start(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.new_event_loop()
        self._closing = False
        threading.Thread(target=self._main, args=(loop,), name=self.name, daemon=True).start()
        return loop

    @staticmethod
    def _main(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            try:
                _cancel_all(loop)
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.run_until_complete(loop.shutdown_default_executor())
            finally:
                asyncio.set_event_loop(None)
                loop.close()

    def _begin(self, coro: Coroutine[Any, Any, Any], context: contextvars.Context, done: Done) -> None:
        loop = asyncio.get_running_loop()
        loop.create_task(self._guard(coro, done), context=context)

    async def _guard(self, coro: Coroutine[Any, Any, Any], done: Done) -> None:
        result: Any = None
        error: BaseException | None = None
        try:
            result = await coro
        except BaseException as ex:  # noqa: BLE001 -- handed to the caller, as asyncio.run would raise it
            error = ex
        await _cancel_others()
        try:
            done(result, error)
        finally:
            self._finished()

    def _finished(self) -> None:
        with self._lock:
            self._active -= 1
            if self._active:
                return
            loop = self._loop
            if loop is None:
                return
            if self._closing:
                self._loop = None
                loop.stop()
                return
            loop.call_later(self.idle_s, self._stop_if_idle, self._generation)

    def _stop_if_idle(self, generation: int) -> None:
        with self._lock:
            if self._active or generation != self._generation or self._loop is None:
                return  # work arrived since this timer was set
            loop, self._loop = self._loop, None
        loop.stop()


async def _cancel_others() -> None:
    """Cancel and await every task on this loop but the current one (asyncio.run's clean-up)."""
    me = asyncio.current_task()
    others = [t for t in asyncio.all_tasks() if t is not me]
    for task in others:
        task.cancel()
    if others:
        await asyncio.gather(*others, return_exceptions=True)


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
