"""The prompt queue: a priority heap in memory, mirrored row by row in the `PromptStore`.

Lives on the server's event loop (no locks): route handlers put and delete, the worker takes.
`on_change` is called after every change of the queue's length (the hub broadcasts `status`).

Several prompts may be running at once (the Ray dispatcher, web/ray_backend/, runs one per
worker actor), keyed by prompt id in start order; the embedded worker has at most one, and
`running` / `running_since` are that one (the oldest running prompt in general).
"""
from __future__ import annotations

import asyncio
import heapq
from typing import Any, Callable, Iterable, Sequence

from web.queue_item import QueueItem, now_ms, queue_number_problem
from web.store import PromptStore


class DuplicatePromptError(ValueError):
    """A prompt id that is already pending or running was submitted again."""


class PromptQueue:
    def __init__(self, store: PromptStore, *, on_change: Callable[[], None] | None = None) -> None:
        self.store = store
        self.on_change = on_change or (lambda: None)
        self._heap: list[QueueItem] = []
        self._ids: set[str] = set()
        # prompt id -> (item, start ms), in start order (dicts keep insertion order).
        self._running: dict[str, tuple[QueueItem, int]] = {}
        self._storing: set[str] = set()  # ids whose store write is under way (put_async)
        self._wakeup = asyncio.Event()
        highest = store.max_number()
        # ComfyUI's counter restarts at 0; ours continues after the stored numbers so that prompts
        # recovered from the database keep their place ahead of new ones. The store only hands back
        # numbers within +-MAX_QUEUE_NUMBER (PromptStore.repair_numbers), so this stays an int64.
        self._counter = int(highest) + 1 if highest is not None and highest >= 0 else 0

    def restore(self, items: Iterable[QueueItem]) -> None:
        """Put back prompts read from the store (they are already stored)."""
        for item in items:
            heapq.heappush(self._heap, item)
            self._ids.add(item.prompt_id)
        self._wakeup.set()

    def next_number(self, front: bool) -> int:
        """ComfyUI's priority for a prompt without `number`: a counter, negated for `front`."""
        n = self._counter
        self._counter += 1
        return -n if front else n

    @property
    def counter(self) -> int:
        """The number the next prompt without `number` gets (ComfyUI's `PromptServer.number`)."""
        return self._counter

    @counter.setter
    def counter(self, value: int) -> None:
        problem = queue_number_problem(value)
        if problem is not None:
            raise ValueError(f"the prompt counter {problem}")
        self._counter = int(value)

    def put_wire(self, item: Sequence[Any]) -> QueueItem:
        """Queue ComfyUI's tuple `(number, prompt_id, prompt, extra_data, outputs_to_execute)`
        as it is (packs' `prompt_queue.put`, compat/pack_queue.py); returns the queued item."""
        number, prompt_id, prompt, extra_data, outputs = tuple(item)[:5]
        problem = queue_number_problem(number)
        if problem is not None:
            raise ValueError(f"queue number {problem}")
        queued = QueueItem(number=float(number), prompt_id=str(prompt_id), prompt=prompt,
                           extra_data=dict(extra_data or {}), outputs=[str(o) for o in outputs])
        self.put(queued)
        return queued

    @property
    def running(self) -> QueueItem | None:
        """The oldest running prompt (the only one with the embedded worker), or None."""
        for item, _ in self._running.values():
            return item
        return None

    @property
    def running_since(self) -> int | None:
        for _, start in self._running.values():
            return start
        return None

    def running_items(self) -> list[QueueItem]:
        """Every running prompt, oldest first."""
        return [item for item, _ in self._running.values()]

    def running_start(self, prompt_id: str) -> int | None:
        entry = self._running.get(prompt_id)
        return entry[1] if entry is not None else None

    def contains(self, prompt_id: str) -> bool:
        return prompt_id in self._ids or prompt_id in self._running or prompt_id in self._storing

    def put(self, item: QueueItem) -> None:
        if self.contains(item.prompt_id):
            raise DuplicatePromptError(f"prompt_id {item.prompt_id!r} is already queued or running")
        self.store.add_pending(item)
        heapq.heappush(self._heap, item)
        self._ids.add(item.prompt_id)
        self._wakeup.set()
        self.on_change()

    async def put_async(self, item: QueueItem) -> None:
        """`put`, with the store's write (the prompt's JSON: megabytes for a big one) in a worker
        thread. The id is held meanwhile, so a second submission of it is refused as in `put`."""
        if self.contains(item.prompt_id):
            raise DuplicatePromptError(f"prompt_id {item.prompt_id!r} is already queued or running")
        self._storing.add(item.prompt_id)
        try:
            await asyncio.to_thread(self.store.add_pending, item)
        finally:
            self._storing.discard(item.prompt_id)
        heapq.heappush(self._heap, item)
        self._ids.add(item.prompt_id)
        self._wakeup.set()
        self.on_change()

    async def get(self) -> QueueItem:
        """Wait for the next prompt; it becomes `running` (in memory and in the store)."""
        while not self._heap:
            self._wakeup.clear()
            await self._wakeup.wait()
        item = heapq.heappop(self._heap)
        self._ids.discard(item.prompt_id)
        start = now_ms()
        self._running[item.prompt_id] = (item, start)
        self.store.mark_running(item.prompt_id, start)
        return item

    def task_done(self, prompt_id: str | None = None) -> None:
        """A running prompt is finished (its history entry is already stored): `prompt_id`,
        or the oldest running one."""
        if prompt_id is None:
            prompt_id = next(iter(self._running), None)
        self._running.pop(prompt_id, None)
        self.on_change()

    def requeue(self, prompt_id: str) -> QueueItem | None:
        """Put a running prompt back in its place among the pending ones (its worker was lost
        before it finished); returns it, or None when it is not running. The queue's length does
        not change, so no `status` goes out."""
        entry = self._running.pop(prompt_id, None)
        if entry is None:
            return None
        item = entry[0]
        self.store.mark_pending(prompt_id)
        heapq.heappush(self._heap, item)
        self._ids.add(prompt_id)
        self._wakeup.set()
        return item

    def interrupt(self, prompt_id: str | None = None) -> bool:
        """Ask a running prompt to stop: `prompt_id`, or (None) every running prompt."""
        if prompt_id is not None:
            entry = self._running.get(prompt_id)
            items = [entry[0]] if entry is not None else []
        else:
            items = self.running_items()
        for item in items:
            item.interrupt.set()
        return bool(items)

    def pending(self) -> list[QueueItem]:
        return sorted(self._heap)

    @property
    def remaining(self) -> int:
        """Pending plus running (ComfyUI's queue_remaining)."""
        return len(self._heap) + len(self._running)

    def delete(self, prompt_ids: Iterable[str]) -> list[str]:
        """Remove pending prompts (a running one is left alone); returns the ids removed."""
        wanted = {pid for pid in prompt_ids if pid in self._ids}
        if not wanted:
            return []
        self._heap = [item for item in self._heap if item.prompt_id not in wanted]
        heapq.heapify(self._heap)
        self._ids -= wanted
        self.store.remove_pending(wanted)
        self.on_change()
        return sorted(wanted)

    def clear(self) -> None:
        self._heap.clear()
        self._ids.clear()
        self.store.clear_pending()
        self.on_change()
