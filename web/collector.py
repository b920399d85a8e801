"""When the cyclic garbage collector's full passes run: between prompts, not in the middle of one.

CPython's collector walks every live container object in a full (generation-2) pass while holding
the GIL, so the server's event loop waits for the whole pass, whatever thread triggered it. Left
to itself, the collector starts a full pass each time the objects that survived younger passes
reach a quarter of the heap: a 100 000-node prompt or a 50 MB body (a million objects or more,
alive until their prompt is stored) caused several passes of 0.2-2 s each while it was read,
validated and run (issue 34; bench/server_hostile.py measures it). The objects the runtime
imports are already out of reach (`gc.freeze()` after the warm-up, web/warmup.py).

`CollectorPacing` therefore turns the automatic full passes off while a worker serves prompts
(young generations are still collected as usual: most cyclic garbage dies young) and runs a full
pass itself at the quiet points: after a prompt has been stored (as ComfyUI's prompt worker
calls `gc.collect()` after its prompts), and from a timer while no prompt runs, each time only
when due: no big body has been read for `idle_check_s` and no request that read one is still
being handled (`note_big_input`: it may still be parsed, validated or stored; on a loaded
machine that took longer than `idle_check_s`, and a timed pass then walked a 50 MB body's two
million objects for 4 s), `min_interval_s` has passed, young passes have run since the last
full pass (`gc.get_count()[2]` of them at
least), and the oldest generation has grown by a quarter since the last full pass left it
(CPython's own rule, so a big cache that stays is not walked again after every prompt). So that
a prompt running for minutes does not keep its cyclic garbage for as long, the timer also runs a
due pass while one runs once `max_defer_s` have passed since the last. The memory manager's own
`gc.collect()` (freeing models, out-of-memory recovery) is unaffected: an explicit collection
ignores the thresholds. The pass after a big prompt still walks what stays cached (about four
objects per node of a chain of trivial nodes): that one pause remains, once per quarter of growth.

The thresholds are the process's; several servers in one process (tests) share them: the first
`start()` sets them, the last `stop()` puts back what was there before.

Freeing is the other pause: reference counting frees a big structure in one uninterrupted
cascade, so a finished prompt's data is taken apart in a worker thread (`release_in_pieces`).
"""
from __future__ import annotations

import asyncio
import gc
import logging
import sys
import threading
import time
import weakref
from collections import Counter
from dataclasses import dataclass
from typing import Callable

log = logging.getLogger(__name__)

# gen-2 threshold meaning "never automatically" (the collector compares a C int against it)
NEVER = 2 ** 31 - 1
SLOW_PASS_S = 0.1  # a full pass that took this long is logged at INFO (bench/server_hostile.py reads it)

_lock = threading.Lock()
_users = 0
_saved: tuple[int, ...] | None = None
_last_big_input = float("-inf")  # time.monotonic() when a big request body was last read
# the tasks of the requests that read a big body (aiohttp runs each request in a task of its own)
_big_input_tasks: "weakref.WeakSet[asyncio.Task]" = weakref.WeakSet()


def note_big_input() -> None:
    """A big request body is being read (web/bodies.py): full passes keep away for a while, and
    for as long as the request that reads it (the calling task) is being handled, so that none
    walks the body while it is parsed, validated and stored (at most `max_defer_s` after the
    last pass, so that a request that never ends cannot hold them off for ever)."""
    global _last_big_input
    _last_big_input = time.monotonic()
    try:
        task = asyncio.current_task()
    except RuntimeError:  # not on an event loop
        task = None
    if task is not None:
        _big_input_tasks.add(task)


def big_input_in_hand() -> bool:
    """Whether a request that read a big body is still being handled."""
    return any(not task.done() for task in list(_big_input_tasks))


class CollectorPacing:
    """Full collections at a prompt worker's quiet points (see the module docstring)."""

    def __init__(self, busy: Callable[[], bool], *, min_interval_s: float = 10.0, min_young_passes: int = 10,
                 idle_check_s: float = 15.0, max_defer_s: float = 120.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`busy()`: whether a prompt runs now (the timer then waits, up to `max_defer_s`)."""
        if min_interval_s < 0 or idle_check_s <= 0 or min_young_passes < 0 or max_defer_s < min_interval_s:
            raise ValueError(f"CollectorPacing needs min_interval_s >= 0, idle_check_s > 0, min_young_passes >= 0 "
                             f"and max_defer_s >= min_interval_s, got {min_interval_s}, {idle_check_s}, "
                             f"{min_young_passes}, {max_defer_s}")
        self.busy = busy
        self.max_defer_s = max_defer_s
        self.min_interval_s = min_interval_s
        self.min_young_passes = min_young_passes
        self.idle_check_s = idle_check_s
        self._clock = clock
        self._last = clock()
        self._survivors = 0  # objects in the oldest generation after the last full pass
        self._started = False
        self._timer: asyncio.TimerHandle | None = None
        self.collections = 0  # full passes run here (tests and diagnostics)
        self.last_pass: FullPass | None = None  # what the latest of them walked and took

    def start(self) -> None:
        """Turn automatic full passes off (for the process) and start the idle timer."""
        global _users, _saved
        if self._started:
            return
        self._started = True
        with _lock:
            if _users == 0:
                _saved = gc.get_threshold()
                gc.set_threshold(_saved[0], _saved[1], NEVER)
            _users += 1
        self._last = self._clock()
        try:
            self._timer = asyncio.get_running_loop().call_later(self.idle_check_s, self._on_timer)
        except RuntimeError:  # no loop: quiet points only
            self._timer = None

    def stop(self) -> None:
        """Stop the timer; the last user puts the thresholds back."""
        global _users, _saved
        if not self._started:
            return
        self._started = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        with _lock:
            _users -= 1
            if _users == 0 and _saved is not None:
                gc.set_threshold(*_saved)
                _saved = None

    def due(self) -> bool:
        """Whether a full pass is worth running now (never while a big body may still be in
        the hands of its request: read within `idle_check_s`)."""
        since_last = self._clock() - self._last
        if not (self._started and gc.get_count()[2] >= self.min_young_passes
                and since_last >= self.min_interval_s
                and time.monotonic() - _last_big_input >= self.idle_check_s):
            return False
        if big_input_in_hand() and since_last < self.max_defer_s:
            return False
        # a list of references, no walk of what they refer to: small next to a full pass
        return len(gc.get_objects(generation=2)) * 4 >= self._survivors * 5

    def quiet_point(self, why: str = "after a prompt") -> bool:
        """A prompt has been stored (or the server is idle): run a full pass if one is due;
        returns whether it ran. `why` goes into the log line."""
        if not self.due():
            return False
        walked = gc.get_objects(generation=2)  # what the pass walks, besides the younger ones
        kinds = _kinds(walked) if log.isEnabledFor(logging.DEBUG) else None
        count = sum(gc.get_count()) + len(walked)
        del walked
        started = time.perf_counter()
        found = gc.collect()
        seconds = time.perf_counter() - started
        self._survivors = len(gc.get_objects(generation=2))
        self._last = self._clock()
        self.collections += 1
        self.last_pass = FullPass(count, found, seconds)
        log.log(logging.INFO if seconds >= SLOW_PASS_S else logging.DEBUG,
                "full garbage collection (%s): walked about %d objects, %d unreachable, in %.1f ms%s", why, count,
                found, seconds * 1000, f"; most walked: {kinds}" if kinds else "")
        return True

    def _on_timer(self) -> None:
        if not self._started:
            return
        if not self.busy():
            self.quiet_point("timer, idle")
        elif self._clock() - self._last >= self.max_defer_s:
            self.quiet_point(f"timer, a prompt running, none for {self.max_defer_s:.0f} s")
        self._timer = asyncio.get_running_loop().call_later(self.idle_check_s, self._on_timer)


@dataclass(frozen=True)
class FullPass:
    """One full pass run at a quiet point: the objects it walked (about), found unreachable, took."""

    walked: int
    unreachable: int
    seconds: float


def _kinds(objects: list, top: int = 6) -> str:
    """The most common types among `objects`, as `name x count` (a DEBUG diagnostic)."""
    counts = Counter(type(o).__qualname__ for o in objects)
    return ", ".join(f"{name} x {n}" for name, n in counts.most_common(top))


def release_in_pieces(holder: list, *, settle_s: float = 1.0) -> int:
    """Empty `holder` and free what it held, a little at a time; returns the containers taken apart.

    Freeing a big structure (a 50 MB body is two million dicts and lists) is one uninterrupted
    cascade of deallocations in C that holds the GIL for as long (0.5 s and more), whichever
    thread drops the last reference. Called in a worker thread, this takes apart every dict and
    list that nothing else refers to, one at a time (its members move to a stack first, so
    emptying it frees nothing big), and the interpreter can hand the GIL to the event loop between
    steps. A container that something else still refers to is left whole (only this reference to
    it is dropped): nobody ever sees a container change. The caller must not keep references of
    its own to what `holder` holds.

    Another thread that has finished with one of `holder`'s values may not have dropped its
    reference yet (a thread pool lets go of a call's arguments just after the caller got the
    answer), so each of them is given up to `settle_s` seconds to become this call's alone.
    """
    stack = holder[::-1]
    holder.clear()
    deadline = time.monotonic() + settle_s
    for value in stack:
        # three references: the stack, `value` and getrefcount's argument
        while type(value) in (dict, list) and sys.getrefcount(value) > 3 and time.monotonic() < deadline:
            time.sleep(0.002)
    value = None
    taken = 0
    while stack:
        value = stack.pop()
        # two references: `value` and getrefcount's argument; any more and someone else holds it
        kind = type(value)
        if (kind is dict or kind is list) and sys.getrefcount(value) == 2:
            taken += 1
            stack.extend(value.values() if kind is dict else value)
            value.clear()
    return taken
