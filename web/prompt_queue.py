"""The prompt queue: a priority heap in memory, mirrored row by row in the `PromptStore`.

Lives on the server's event loop (no locks): route handlers put and delete, the worker takes.
`on_change` is called after every change of the queue's length (the hub broadcasts `status`).

Several prompts may be running at once (the Ray dispatcher, web/ray_backend/, runs one per
worker actor), keyed by prompt id in start order; the embedded worker has at most one, and
`running` / `running_since` are that one (the oldest running prompt in general).

Queue control (docs/queue.md), each change written to the store before it is made in memory:
  pause() / resume()   `get` hands out nothing while paused (a running prompt finishes); the
                       flag is durable, so a restarted server is still paused
  move(id, position)   a pending prompt to a place in the order, by rewriting queue numbers
  retry(id) -> new id  a failed or interrupted prompt queued again under a new id, linked both ways
  set_priority(owner, p)  where that owner's later prompts enter the queue (the rule below)

Scheduling rule for priorities: the queue runs prompts in `number` order, as ComfyUI does. A
prompt submitted without a `number` gets ComfyUI's counter value (negated for `front`) minus
`priority * PRIORITY_STEP`, where `priority` (0..MAX_PRIORITY, 0 by default) belongs to the
prompt's owner. With the counter far below PRIORITY_STEP, every prompt of a higher-priority
owner therefore runs before those of lower-priority owners, first come first served within one
priority. A priority applies to prompts submitted after it is set; an explicit `number` from the
client, and `move`, override it.
"""
from __future__ import annotations

import asyncio
import heapq
import math
import uuid
from typing import Any, Callable, Iterable, Sequence

from web.queue_item import DEFAULT_OWNER, QueueItem, now_ms, queue_number_problem
from web.store import PromptStore, StoreError

# See the module docstring: one priority level moves a prompt ahead of 2^32 counter values; the
# largest priority keeps every number far inside +-MAX_QUEUE_NUMBER (2^53).
PRIORITY_STEP = 2 ** 32
MAX_PRIORITY = 1000
MAX_OWNER_LENGTH = 200


class DuplicatePromptError(ValueError):
    """A prompt id that is already pending or running was submitted again."""


class QueueControlError(ValueError):
    """A queue-control request that cannot be done; `http_status` is the answer routes give."""

    http_status = 400


class UnknownPromptError(QueueControlError):
    """No pending prompt (move) or no history entry (retry) has this id."""

    http_status = 404


class PromptStateError(QueueControlError):
    """The prompt exists but is in the wrong state (moving a running one, retrying a success)."""

    http_status = 409


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
        self._paused = store.paused()
        self._priorities = store.priorities()
        # While a taker waits in `get` because the queue is paused: how many pending prompts it
        # saw and left (0 otherwise). Lets a client tell "paused and holding N" from "not yet looked".
        self._held = 0
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

    def next_number(self, front: bool, owner: str = DEFAULT_OWNER) -> int:
        """ComfyUI's priority for a prompt without `number`: a counter, negated for `front`,
        shifted by `owner`'s priority (module docstring)."""
        n = self._counter
        self._counter += 1
        return (-n if front else n) - self.priority(owner) * PRIORITY_STEP

    # -- queue control ---------------------------------------------------------------------
    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def held(self) -> int:
        """How many pending prompts a waiting taker left in the queue because it is paused."""
        return self._held

    def pause(self) -> None:
        """Hand out no more prompts (running ones finish). Durable; idempotent."""
        if not self._paused:
            self.store.set_paused(True)
            self._paused = True
            self._wakeup.set()  # a waiting taker looks again and reports what it holds
            self.on_change()

    def resume(self) -> None:
        """Hand out prompts again. Durable; idempotent."""
        if self._paused:
            self.store.set_paused(False)
            self._paused = False
            self._wakeup.set()
            self.on_change()

    def exec_info(self) -> dict:
        """The `status` message's exec_info: ComfyUI's {queue_remaining}, plus `paused: true`
        while paused (left out otherwise, so an unpaused server sends ComfyUI's exact shape)."""
        info: dict = {"queue_remaining": self.remaining}
        if self._paused:
            info["paused"] = True
        return info

    def state(self) -> dict:
        """What GET /api/queue/state answers."""
        return {"paused": self._paused, "held": self._held,
                "running": [item.prompt_id for item in self.running_items()],
                "pending": [item.prompt_id for item in self.pending()],
                "queue_remaining": self.remaining}

    def priority(self, owner: str) -> int:
        return self._priorities.get(owner, 0)

    def priorities(self) -> dict[str, int]:
        return dict(self._priorities)

    def set_priority(self, owner: str, priority: int) -> None:
        """`owner`'s priority, 0..MAX_PRIORITY (durable); prompts submitted later enter by it."""
        if not isinstance(owner, str) or not owner or len(owner) > MAX_OWNER_LENGTH:
            raise QueueControlError(f"owner must be a non-empty string of at most {MAX_OWNER_LENGTH} characters")
        if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= MAX_PRIORITY:
            raise QueueControlError(f"priority must be an integer from 0 to {MAX_PRIORITY}, got {priority!r}"[:200])
        self.store.set_priority(owner, priority)
        if priority:
            self._priorities[owner] = priority
        else:
            self._priorities.pop(owner, None)

    def move(self, prompt_id: str, position: int) -> QueueItem:
        """Put pending `prompt_id` at `position` (0: first) of the pending order; returns it.

        Its number becomes one below the first (front), one above the last (back), or one between
        its new neighbours; where no number fits between them every pending prompt is numbered
        afresh, 1 apart from the lowest, in the new order. Written to the store first."""
        if prompt_id in self._running:
            raise PromptStateError(f"prompt {prompt_id} is running and cannot be moved")
        if prompt_id not in self._ids:
            raise UnknownPromptError(f"prompt {prompt_id} is not pending")
        order = sorted(self._heap)
        if isinstance(position, bool) or not isinstance(position, int) or not 0 <= position < len(order):
            raise QueueControlError(f"position must be an integer from 0 to {len(order) - 1}, got {position!r}"[:200])
        item = next(i for i in order if i.prompt_id == prompt_id)
        others = [i for i in order if i.prompt_id != prompt_id]
        if others:
            number = self._number_at(others, position)
            if number is not None:
                changes = [(item, number)]
            else:  # no room: renumber the whole new order
                others.insert(position, item)
                start = math.floor(others[0].number)
                changes = [(queued, start + index) for index, queued in enumerate(others)]
            for queued, value in changes:
                problem = queue_number_problem(value)
                if problem is not None:
                    raise QueueControlError(f"moving prompt {prompt_id} needs a queue number that {problem}")
            self.store.set_numbers([(queued.prompt_id, value) for queued, value in changes])
            for queued, value in changes:
                queued.number = value
            heapq.heapify(self._heap)
            highest = max(value for _, value in changes)
            if highest >= self._counter:  # prompts submitted later still go after it
                self._counter = math.floor(highest) + 1
            self.on_change()
        return item

    @staticmethod
    def _number_at(others: list[QueueItem], position: int) -> float | None:
        """A number that sorts a prompt at `position` among `others`, or None when none fits."""
        if position == 0:
            number = others[0].number - 1
            return number if number < others[0].number else None
        if position == len(others):
            number = others[-1].number + 1
            return number if number > others[-1].number else None
        low, high = others[position - 1].number, others[position].number
        middle = math.floor((low + high) / 2)
        if low < middle < high:
            return middle
        middle = (low + high) / 2
        return middle if low < middle < high else None

    def retry(self, prompt_id: str, *, front: bool = False) -> str:
        """Queue a failed or interrupted prompt again: the same prompt, extra data (the sensitive
        keys were never stored) and outputs, under a new id; the old history entry gets
        `retried_as`, the new prompt `retry_of`. Returns the new id."""
        if self.contains(prompt_id):
            raise PromptStateError(f"prompt {prompt_id} is still queued or running")
        record = self.store.history_record(prompt_id)
        if record is None:
            raise UnknownPromptError(f"prompt {prompt_id} has no history entry")
        if record.status not in ("error", "interrupted"):
            raise PromptStateError(f"prompt {prompt_id} finished with status {record.status!r}; only failed or "
                                   "interrupted prompts can be retried")
        if record.retried_as:
            raise PromptStateError(f"prompt {prompt_id} was already retried as {record.retried_as}")
        wire = record.entry.get("prompt")
        if (not isinstance(wire, list) or len(wire) < 5 or not isinstance(wire[2], dict)
                or not isinstance(wire[3], dict) or not isinstance(wire[4], list)):
            raise PromptStateError(f"prompt {prompt_id}'s stored prompt cannot be read")
        extra_data = dict(wire[3])
        extra_data["create_time"] = created = now_ms()
        item = QueueItem(number=self.next_number(front, record.owner), prompt_id=str(uuid.uuid4()), prompt=wire[2],
                         extra_data=extra_data, outputs=[str(o) for o in wire[4]], create_time=created,
                         owner=record.owner, retry_of=prompt_id)
        try:
            self.store.add_retry(item)
        except StoreError as exc:  # deleted or retried by someone else meanwhile
            raise PromptStateError(str(exc)) from None
        heapq.heappush(self._heap, item)
        self._ids.add(item.prompt_id)
        self._wakeup.set()
        self.on_change()
        return item.prompt_id

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
        """Wait for the next prompt (and, while paused, for `resume`); it becomes `running` (in
        memory and in the store). Takes nothing before its last wait, so cancelling it loses nothing."""
        while not self._heap or self._paused:
            self._held = len(self._heap) if self._paused else 0
            self._wakeup.clear()
            try:
                await self._wakeup.wait()
            finally:
                self._held = 0
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
        self._wakeup.set()  # a taker held by `pause` counts again
        self.on_change()
        return sorted(wanted)

    def clear(self) -> None:
        self._heap.clear()
        self._ids.clear()
        self.store.clear_pending()
        self._wakeup.set()
        self.on_change()
