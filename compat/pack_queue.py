"""`PromptServer.instance.prompt_queue` (ComfyUI's `execution.PromptQueue`) over the server's
queue (web.prompt_queue.PromptQueue) and history store (web.store.PromptStore).

Queue items are ComfyUI's tuples `(number, prompt_id, prompt, extra_data, outputs_to_execute)`
(`QueueItem.wire()`); the running prompt is `currently_running`, keyed by a task counter as in
ComfyUI. The server's queue lives on its event loop; a pack calling from a node's thread (or any
other) has the change made on that loop, and waits for it. Taking prompts off the queue (`get`,
`task_done`) is the server's worker's job: a pack doing so would steal a prompt from it, so
those raise `QueueOwnedByServerError`. Every method raises `ServerNotStartedError` before a
server is bound to the session (no queue exists then; packs may still keep the object).
"""
from __future__ import annotations

import asyncio
from concurrent.futures import Future
from typing import Any, Callable, TypeVar

T = TypeVar("T")


class ServerNotStartedError(RuntimeError):
    """The prompt queue was used before a server was bound to the compat session."""


class QueueOwnedByServerError(RuntimeError):
    """A pack tried to take prompts off the queue, which only the server's worker does."""


class PackPromptQueue:
    """ComfyUI's `PromptQueue` methods over the server's queue and store (see the module docstring)."""

    def __init__(self, session: Any) -> None:
        self._session = session

    # -- plumbing -------------------------------------------------------------------------------
    def _state(self) -> Any:
        state = self._session.state
        if state is None:
            raise ServerNotStartedError("PromptServer.instance.prompt_queue: no server is running in this process "
                                        "yet (the queue exists once the server starts)")
        return state

    def _on_loop(self, fn: Callable[[], T]) -> T:
        """`fn()` on the server's event loop (the queue's thread), waiting for its result."""
        loop = getattr(self._state().hub, "loop", None)
        if loop is None or not loop.is_running() or _running_loop() is loop:
            return fn()
        done: Future = Future()

        def call() -> None:
            try:
                done.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 -- handed back to the calling thread
                done.set_exception(exc)

        loop.call_soon_threadsafe(call)
        return done.result()

    # -- the queue ------------------------------------------------------------------------------
    def put(self, item: Any) -> None:
        """Queue `(number, prompt_id, prompt, extra_data, outputs_to_execute)` as it is (no
        validation, as ComfyUI's `put`)."""
        queue = self._state().queue
        self._on_loop(lambda: queue.put_wire(item))

    def get(self, timeout: float | None = None) -> Any:
        raise QueueOwnedByServerError("prompt_queue.get: the server's worker takes prompts off the queue; "
                                      "packs read it with get_current_queue()")

    def task_done(self, item_id: Any, history_result: Any, status: Any = None) -> None:
        raise QueueOwnedByServerError("prompt_queue.task_done: the server's worker finishes its own prompts")

    def get_current_queue(self) -> tuple[list[list], list[list]]:
        """`(running items, pending items)`, each a list of ComfyUI queue tuples (copies)."""
        queue = self._state().queue
        return self._on_loop(lambda: ([item.wire() for item in queue.running_items()],
                                      [item.wire() for item in queue.pending()]))

    get_current_queue_volatile = get_current_queue

    def get_tasks_remaining(self) -> int:
        """Pending plus running prompts (the `queue_remaining` of status messages)."""
        return self._state().queue.remaining

    @property
    def currently_running(self) -> dict[int, list]:
        return {n: item.wire() for n, item in enumerate(self._state().queue.running_items())}

    @property
    def queue(self) -> list[list]:
        return self.get_current_queue()[1]

    def wipe_queue(self) -> None:
        queue = self._state().queue
        self._on_loop(queue.clear)

    def delete_queue_item(self, function: Callable[[list], bool]) -> bool:
        """Remove the first pending item for which `function(item tuple)` is true."""
        queue = self._state().queue

        def delete() -> bool:
            for item in queue.pending():
                if function(item.wire()):
                    return bool(queue.delete([item.prompt_id]))
            return False

        return self._on_loop(delete)

    # -- history --------------------------------------------------------------------------------
    def get_history(self, prompt_id: str | None = None, max_items: int | None = None, offset: int = -1,
                    map_function: Callable[[dict], Any] | None = None) -> dict:
        """ComfyUI's windowed history (`{prompt_id: entry}`), or one prompt's entry."""
        store = self._state().store
        if prompt_id is not None:
            entry = store.history_entry(prompt_id)
            if entry is None:
                return {}
            return {prompt_id: map_function(entry) if map_function is not None else entry}
        entries = store.history(max_items, offset)
        if map_function is not None:
            entries = {key: map_function(value) for key, value in entries.items()}
        return entries

    @property
    def history(self) -> dict:
        return self.get_history()

    def wipe_history(self) -> None:
        self._state().store.clear_history()

    def delete_history_item(self, id_to_delete: str) -> None:
        self._state().store.delete_history([id_to_delete])

    # -- flags (POST /free) ---------------------------------------------------------------------
    def set_flag(self, name: str, data: Any) -> None:
        """`unload_models` / `free_memory`: acted on between prompts, as POST /free."""
        if name not in ("unload_models", "free_memory"):
            raise ValueError(f"prompt_queue.set_flag: known flags are 'unload_models' and 'free_memory', got {name!r}")
        worker = self._state().worker
        if worker is None:
            raise ServerNotStartedError("prompt_queue.set_flag: the server's worker has not started")
        self._on_loop(lambda: worker.request_free_flags(**{name: bool(data)}))


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None

