"""An insertion-ordered map whose past states stay readable, each built only when read.

`progress_state` events each carry the whole node map as it was at that event (graph/progress.py).
Copying the map for every change made a prompt's progress bookkeeping quadratic in its node
count, although most of those maps are never read: the server's coalescer sends only the
latest one per frame, and a prompt without a client reads none. Here `set` is O(1) and returns
a `Version` handle; `read(version)` builds that state's dict on demand.

Each version records the change that turned it into the next one (key, value before, value
after), a chain from old to new (nothing points back, so a version nobody holds is freed at
once). `read` moves a private cursor dict to the version asked for, forwards (redo) or
backwards (undo) along the chain, starting from a fresh copy of the live map when that is
closer; then it hands out a copy of the cursor, so a reader that changes its map changes
nothing else. A reader that reads every version in order pays one copy per version, as the
eager copies did; one that reads the newest version pays about one copy. This is a
reverse-delta scheme after H. Baker, "Shallow binding makes functional arrays fast" (1991),
with the live map always staying with the writer.

Keys are never removed, so undoing changes newest first (and redoing them oldest first)
restores the exact key order the map had: an undone insertion is always the last key then.

Threads: one writer thread (the prompt's) and any number of reader threads (the server's
loop). The writer never waits: readers never hold anything it needs. A reader takes the live
map only between two writes (a sequence lock: `_writes` is odd while a write is under way), and
walks only versions older than one it was handed, which were complete before that version was.
Readers exclude each other with their own lock (the cursor is theirs). A lock shared with the
writer made each read wait for the writer's thread to give up the GIL: with a reader that reads
every map, reads took ~0.5 ms each instead of the copy's ~0.05 ms.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Generic, Hashable, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_ABSENT: Any = object()

# Moving the cursor one change costs about as much as copying this many entries of a dict.
_ENTRIES_PER_STEP = 8


class Version:
    """One state of a `VersionedMap`: the `seq`-th. Once a newer state exists, `key`, `before`
    and `after` describe the change that turned this state into `newer`."""

    __slots__ = ("seq", "newer", "key", "before", "after", "built")

    def __init__(self, seq: int) -> None:
        self.seq = seq
        self.newer: Version | None = None
        self.key: Any = None
        self.before: Any = _ABSENT
        self.after: Any = _ABSENT
        self.built: Any = _ABSENT  # what `read` built for this version, once read

    @property
    def is_built(self) -> bool:
        """Whether this state has been read (and so built) yet."""
        return self.built is not _ABSENT


class VersionedMap(Generic[K, V]):
    def __init__(self) -> None:
        self._live: dict[K, V] = {}
        self._head = Version(0)  # the current state
        self._writes = 0  # odd while `set` runs (the readers' sequence lock)
        self._read_lock = threading.Lock()  # readers only: the cursor below is theirs
        self._cursor: Version | None = None  # the state `_state` holds
        self._state: dict[K, V] = {}

    def set(self, key: K, value: V) -> Version:
        """Set `key` (a new key goes last); the returned handle names the new state. Call it
        from one thread only."""
        self._writes += 1
        live, old = self._live, self._head
        old.key, old.before, old.after = key, live.get(key, _ABSENT), value
        live[key] = value
        new = self._head = old.newer = Version(old.seq + 1)
        self._writes += 1
        return new

    def __len__(self) -> int:
        """The number of keys now (from the writer's thread)."""
        return len(self._live)

    def get(self, key: K, default: Any = None) -> Any:
        """The current value of `key` (from the writer's thread)."""
        return self._live.get(key, default)

    def read(self, version: Version, build: Callable[[dict[K, V]], Any] = lambda state: state) -> Any:
        """`build(a new dict of the map at version)`, computed once per version: every reader
        of the same version gets the same object."""
        built = version.built
        if built is not _ABSENT:
            return built
        with self._read_lock:
            if version.built is _ABSENT:
                self._move_cursor(version)
                version.built = build(dict(self._state))
            return version.built

    def _live_copy(self) -> tuple[Version, dict[K, V]]:
        """The head and a copy of the live map, taken between two writes."""
        while True:
            writes = self._writes
            if not writes & 1:
                head = self._head
                state = dict(self._live)  # one C call: no other Python code runs meanwhile
                if self._writes == writes:
                    return head, state
            time.sleep(0)  # a write is under way on the writer's thread: let it finish

    def _move_cursor(self, version: Version) -> None:
        cursor, head = self._cursor, self._head
        from_head = head.seq - version.seq + len(self._live) // _ENTRIES_PER_STEP
        if cursor is None or abs(version.seq - cursor.seq) > from_head:
            cursor, self._state = self._live_copy()
        state = self._state
        if version.seq >= cursor.seq:  # redo the changes from the cursor to the version
            step = cursor
            while step is not version:
                state[step.key] = step.after
                step = step.newer  # type: ignore[assignment]
        else:  # undo the changes from the version to the cursor, newest first
            changes: list[Version] = []
            step = version
            while step is not cursor:
                changes.append(step)
                step = step.newer  # type: ignore[assignment]
            deleted = False
            for step in reversed(changes):
                if step.before is _ABSENT:
                    del state[step.key]
                    deleted = True
                else:
                    state[step.key] = step.before
            if deleted:
                # A dict with deleted slots copies entry by entry; a compact one, as a block.
                self._state = dict(state)
        self._cursor = version
