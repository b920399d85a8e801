"""Per-prompt node progress, rendered as ComfyUI's `progress_state` messages, and their pacing.

`ProgressState` mirrors `comfy_execution/progress.py` (ProgressRegistry with the WebUI handler):
a node is `running` from its start (value 0, max 1) through its updates, then `finished` with
value = max. Every change emits one `progress_state` event. With `scope="all"` (ComfyUI's
behaviour, the default) it lists every node that is not pending, so a prompt's progress messages
are quadratic in its node count; `scope="active"` lists only the running nodes plus the node that
just changed (linear, but ComfyUI's frontend then loses its finished nodes: it draws them in the
minimap with the "success" colour and keys its preview bookkeeping on them).

The engine's own cost stays linear with `all` too: each event holds a handle on a version of the
node map (graph/versions.py) and builds its `nodes` dict only when its `data` is first read, so
the maps nobody reads (the coalescer's superseded ones, every map of a prompt without a client)
cost O(1) each. What a reader gets is exactly the map an eager copy would have held.

`ProgressCoalescer` paces the `all` stream on its way to a client without changing what ComfyUI's
frontend shows. That frontend (comfyui-frontend-package 1.58.1, `stores/executionStore.ts`)
keeps only the latest `progress_state` per animation frame (`createRafCoalescer`, latest wins)
and *replaces* its node-state map with that message's `nodes`, so every message must carry the
whole map, and messages it never applies are wasted. The coalescer sends the current map at most
once per interval (the leading change at once, the latest of the others when the interval ends)
and at once when asked (`flush`, before the prompt's final events). The interval is one frame
(1/60 s) for maps up to ~800 nodes and grows with the map (`seconds_per_entry` per node), so the
entries sent per second are bounded: a prompt's progress bytes are at most
`(run time / seconds_per_entry + 2 * nodes)` entries, linear in its node count for nodes that take
bounded time, where ComfyUI's stream has `nodes * (nodes + 1)`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from graph.events import (EXECUTION_ERROR, EXECUTION_INTERRUPTED, EXECUTION_SUCCESS, PROGRESS_STATE, Event)
from graph.prompt import DynamicPrompt
from graph.versions import Version, VersionedMap

RUNNING = "running"
FINISHED = "finished"


SCOPES = ("all", "active")

# A client gets the latest map before these (and before `executing {node: null}`, which the
# server sends itself): its last view of a prompt's nodes is always the true final one.
FLUSH_BEFORE = frozenset({EXECUTION_SUCCESS, EXECUTION_ERROR, EXECUTION_INTERRUPTED})


class ProgressStateEvent(Event):
    """A `progress_state` event whose data (`{"prompt_id", "nodes"}`) is built when first read.

    It is an `Event` like any other (same `type`, equal `data`, equal to the eager event); the
    prompt id is readable without building the map.
    """

    def __init__(self, prompt_id: str, nodes: VersionedMap, version: Version, entries: int | None = None) -> None:
        object.__setattr__(self, "type", PROGRESS_STATE)
        object.__setattr__(self, "prompt_id", prompt_id)
        object.__setattr__(self, "_nodes", nodes)
        object.__setattr__(self, "_version", version)
        # the map's size at this version (keys are never removed): pacing and the server's choice
        # of where to encode read it without building the map
        object.__setattr__(self, "entries", len(nodes) if entries is None else entries)

    @property  # type: ignore[override]
    def data(self) -> dict:
        prompt_id = self.prompt_id
        return self._nodes.read(self._version, lambda nodes: {"prompt_id": prompt_id, "nodes": nodes})

    @property
    def is_built(self) -> bool:
        """Whether the map has been built (some consumer read `data`)."""
        return self._version.is_built

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Event):
            return NotImplemented
        return self.type == other.type and self.data == other.data

    __hash__ = None  # type: ignore[assignment]  # data is a dict, as for an eager event


def entries_of(event: Event) -> int:
    """How many nodes the event's `progress_state` map lists, without building a lazy map."""
    if isinstance(event, ProgressStateEvent):
        return event.entries
    return len((event.data or {}).get("nodes") or ())


def prompt_of(event: Event) -> Any:
    """The event's prompt id, without building a lazy progress map."""
    if isinstance(event, ProgressStateEvent):
        return event.prompt_id
    return (event.data or {}).get("prompt_id")


def _ignore(event: Event) -> None:
    """The emit of a closed `ProgressState`."""


class ProgressState:
    def __init__(self, prompt_id: str, dynprompt: DynamicPrompt, emit: Callable[[Event], None],
                 scope: str = "all") -> None:
        if scope not in SCOPES:
            raise ValueError(f"progress_state scope must be one of {SCOPES}, got {scope!r}")
        self.scope = scope
        self.prompt_id = prompt_id
        self.dynprompt = dynprompt
        self._emit = emit
        # node id -> the entry as sent; entries are replaced, never mutated, so a map once built
        # for an event never changes afterwards.
        self._nodes: VersionedMap[str, dict] = VersionedMap()
        self._running: dict[str, dict] = {}
        self._identities: dict[str, dict] = {}
        self._closed = False

    def close(self) -> None:
        """The prompt is over: drop the node maps (an event already emitted keeps the version it
        names) and emit nothing more (a node's stray thread may still report progress late)."""
        self._closed = True
        self._emit = _ignore
        self._nodes = VersionedMap()
        self._running = {}
        self._identities = {}

    def _identity(self, node_id: str) -> dict:
        """The fields of a node's entry that never change during the prompt (looked up once)."""
        identity = self._identities.get(node_id)
        if identity is None:
            dynprompt = self.dynprompt
            identity = self._identities[node_id] = {
                "node_id": node_id, "prompt_id": self.prompt_id,
                "display_node_id": dynprompt.get_display_node_id(node_id),
                "parent_node_id": dynprompt.get_parent_node_id(node_id),
                "real_node_id": dynprompt.get_real_node_id(node_id),
            }
        return identity

    def _set(self, node_id: str, state: str, value: float, total: float) -> None:
        if self._closed:
            return
        entry = {"value": value, "max": total, "state": state, **self._identity(node_id)}
        version = self._nodes.set(node_id, entry)
        if state == RUNNING:
            self._running[node_id] = entry
        else:
            self._running.pop(node_id, None)
        if self.scope == "all":
            self._emit(ProgressStateEvent(self.prompt_id, self._nodes, version))
            return
        nodes = dict(self._running)  # a handful of nodes: copied at once
        nodes[node_id] = entry
        self._emit(Event(PROGRESS_STATE, {"prompt_id": self.prompt_id, "nodes": nodes}))

    def start(self, node_id: str) -> None:
        self._set(node_id, RUNNING, 0.0, 1.0)

    def update(self, node_id: str, value: float, total: float) -> None:
        self._set(node_id, RUNNING, value, total)

    def finish(self, node_id: str) -> None:
        entry = self._nodes.get(node_id)
        total = entry["max"] if entry is not None else 1.0
        self._set(node_id, FINISHED, total, total)

    def get(self, node_id: str) -> dict | None:
        return self._nodes.get(node_id)


@dataclass(frozen=True)
class ProgressPacing:
    """How often a client may get a `progress_state` map of a given size."""

    min_interval: float = 1 / 60  # one animation frame: the frontend applies at most one per frame
    seconds_per_entry: float = 20e-6  # ~170 bytes per entry: ~8.5 MB/s at most, whatever the map size

    def interval(self, entries: int) -> float:
        """Seconds to wait after sending a map of `entries` nodes before sending the next."""
        return max(self.min_interval, entries * self.seconds_per_entry)


class ProgressCoalescer:
    """Paces one prompt's `progress_state` events to one client (latest wins; see the module doc).

    `send(event)` delivers an event; `call_later(delay, fn)` schedules `fn` (an asyncio loop's
    `call_later`; the handle it returns needs `cancel()`); `clock()` is in seconds. Not
    thread-safe: call it from the thread that owns `call_later` (the server's event loop).
    """

    def __init__(self, send: Callable[[Event], None], call_later: Callable[[float, Callable[[], None]], Any],
                 *, clock: Callable[[], float] = time.monotonic, pacing: ProgressPacing = ProgressPacing()) -> None:
        self._send = send
        self._call_later = call_later
        self._clock = clock
        self.pacing = pacing
        self._pending: Event | None = None
        self._timer: Any = None
        self._next_at = float("-inf")  # when the next map may go out
        self._closed = False

    def push(self, event: Event) -> None:
        """A new `progress_state` event: send it now if the interval allows, else hold it,
        replacing any event still held."""
        if self._closed:
            self._send(event)
            return
        pending = self._pending
        if pending is not None and prompt_of(pending) != prompt_of(event):
            self.flush()  # maps of two prompts never replace each other (read without building them)
        now = self._clock()
        if self._timer is None and now >= self._next_at:
            self._pending = None
            self._deliver(event, now)
            return
        self._pending = event
        if self._timer is None:
            self._timer = self._call_later(self._next_at - now, self._on_timer)

    def flush(self) -> None:
        """Send the held event, if any, now (before `executing null` and the prompt's end)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        event, self._pending = self._pending, None
        if event is not None:
            self._deliver(event, self._clock())

    def close(self) -> None:
        """Flush, and from now on pass every event straight through."""
        self.flush()
        self._closed = True

    def _on_timer(self) -> None:
        self._timer = None
        event, self._pending = self._pending, None
        if event is not None:
            self._deliver(event, self._clock())

    def _deliver(self, event: Event, now: float) -> None:
        # the size, not the map: the map is built only by whoever encodes it (and the server
        # encodes nothing for a client without a socket; web/hub.py)
        self._next_at = now + self.pacing.interval(entries_of(event))
        self._send(event)
