"""Keeping one custom-node pack's failures its own: bounded calls into pack code, exits refused.

ComfyUI isolates packs in-process only (reference/comfyui-contract.md §4.2): an exception at
import marks the pack `(IMPORT FAILED)`, one from `INPUT_TYPES` drops that node from
`/object_info`; a pack that hangs hangs the server, and one that calls `sys.exit()` or
`os._exit()` while importing ends it. Here the same failures are tolerated and also:

- **Bounded waits.** With a limit (`PackLimits`), pack code (the import, `comfy_entrypoint`,
  each `INPUT_TYPES()`) runs in a helper thread and the caller waits at most that long. Python
  cannot stop a thread, so a call that overruns is *abandoned*: it goes on running in the
  background (a daemon thread, so it never holds up the exit), the log says so, and what it does
  later is not used: a late import registers nothing and a late registration through
  `RegistryView` is refused. A node whose `INPUT_TYPES()` is still stuck is not called again
  until that call returns, so one stuck node costs one thread, not one per request. Helper
  threads are pooled (a thread start per call would cost more than most `INPUT_TYPES()`).
  `None` as a limit runs the code in the caller's thread, exactly as ComfyUI does.
- **Exits refused.** `sys.exit()` raises `SystemExit`, which the loader catches like any error.
  `os._exit()` and `os.abort()` cannot be caught, so while packs load (`refuse_exits`, around
  the imports and around the prestartup scripts) both are replaced by functions that raise
  `PackExitError` in a thread that runs a pack's import or script (`importing`) and do the real
  thing in every other thread; the originals are put back afterwards.

The helper thread runs in a copy of the caller's context (the compat session, the pack being
loaded). An import sees the event loop it would see in the caller's thread (`caller_event_loop`:
ComfyUI imports packs inside its running loop and packs call `asyncio.get_event_loop()` at
import). `signal.signal()` works only in the main thread, and ComfyUI imports packs there, so
while packs load a pack's `signal.signal()` in a helper thread is forwarded to the thread that
waits for it (`_Call.in_waiting_thread`): the waiting thread serves such requests until the call
ends or its limit passes, so the handler is set where the pack would have set it, and a pack that
hangs is still abandoned on time.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import logging
import os
import queue
import signal
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Iterator, MutableMapping, TypeVar

from graph.errors import GraphError

log = logging.getLogger("graph.packs")

T = TypeVar("T")

# What a server uses unless told otherwise (`--custom-node-import-timeout`, `--custom-node-call-timeout`):
# long enough for a pack that installs its requirements at import, short enough that a stuck one
# does not keep the server from ever starting.
DEFAULT_IMPORT_TIMEOUT = 300.0
DEFAULT_CALL_TIMEOUT = 30.0


@dataclass(frozen=True)
class PackLimits:
    """How long the loader waits for a pack's code (seconds; None: as long as it takes).

    `import_timeout`: one pack's import plus its `comfy_entrypoint` registration;
    `call_timeout`: one `INPUT_TYPES()` call (at load, for each prompt and each /object_info)."""

    import_timeout: float | None = DEFAULT_IMPORT_TIMEOUT
    call_timeout: float | None = DEFAULT_CALL_TIMEOUT

    def __post_init__(self) -> None:
        for name in ("import_timeout", "call_timeout"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"PackLimits.{name}: expected a positive number of seconds or None, got {value!r}")

    @classmethod
    def unbounded(cls) -> "PackLimits":
        """ComfyUI's behaviour: every call in the caller's thread, no limit."""
        return cls(None, None)


class PackTimeoutError(GraphError):
    """A pack's code did not return within its limit; the call was abandoned, still running."""


class PackExitError(GraphError):
    """A pack called `os._exit()` / `os.abort()` while it was being imported (or its prestartup script ran)."""


class PackAbandonedError(GraphError):
    """Code of a pack whose loading was abandoned tried to register nodes afterwards."""


# -- bounded calls ------------------------------------------------------------------------------

class _Call:
    """One call of pack code in a pool thread; `wait(limit)` says whether it finished in time."""

    def __init__(self, fn: Callable[[], Any], label: str, on_late: Callable[["_Call"], None] | None,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.fn = fn
        self.label = label
        self.on_late = on_late
        self.done = threading.Event()  # fn returned or raised
        self.settled = threading.Event()  # ... and, when it was abandoned, on_late has run
        self.abandoned = False
        self.value: Any = None
        self.error: BaseException | None = None
        self.started = time.perf_counter()
        self.seconds = 0.0
        self._lock = threading.Lock()
        self._context = contextvars.copy_context()
        self._loop = loop if loop is not None else _running_loop()
        # work the pack's thread asks the waiting thread to do (signal.signal); None wakes the waiter
        self._requests: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()

    def run_here(self) -> None:
        """Run in the calling (pool) thread; the caller waits in `wait`."""
        if self._loop is not None:
            asyncio.set_event_loop(self._loop)  # get_event_loop() answers as in the caller's thread
        _RUNNING.call = self
        try:
            self.value = self._context.run(self.fn)
        except BaseException as exc:  # noqa: BLE001 -- handed to the caller, whatever it is
            self.error = exc
        finally:
            _RUNNING.call = None
            if self._loop is not None:
                asyncio.set_event_loop(None)
            self.seconds = time.perf_counter() - self.started
            with self._lock:
                self.done.set()
                late = self.abandoned
            self._requests.put(None)
            try:
                if late and self.on_late is not None:
                    self.on_late(self)
            finally:
                _ABANDONED.discard(self)
                self.settled.set()

    def wait(self, limit: float) -> bool:
        """Start the call and wait at most `limit` seconds, serving its `in_waiting_thread` requests."""
        _POOL.submit(self)
        deadline = time.monotonic() + limit
        while not self.done.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                request = self._requests.get(timeout=remaining)
            except queue.Empty:
                break
            if request is not None:
                request.run()
        with self._lock:
            if self.done.is_set():
                self.settled.set()
                return True
            self.abandoned = True
            _ABANDONED.add(self)
        # requests made before the limit passed are answered, so the pack's thread is not left waiting
        while True:
            try:
                request = self._requests.get_nowait()
            except queue.Empty:
                return False
            if request is not None:
                request.run()

    def in_waiting_thread(self, fn: Callable[[], T]) -> tuple[bool, T | None]:
        """Called from the pack's thread: `fn()` run by the thread waiting in `wait`, its value
        (or exception) handed back; `(False, None)` when the wait is over (abandoned: nobody serves)."""
        request = _Request(fn)
        with self._lock:
            if self.abandoned or self.done.is_set():
                return False, None
            self._requests.put(request)
        request.finished.wait()
        if request.error is not None:
            raise request.error
        return True, request.value


class _Request:
    """One piece of work a pack's helper thread hands to the thread that waits for it."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.value: Any = None
        self.error: BaseException | None = None
        self.finished = threading.Event()

    def run(self) -> None:
        try:
            self.value = self.fn()
        except BaseException as exc:  # noqa: BLE001 -- raised again in the asking thread
            self.error = exc
        finally:
            self.finished.set()


_RUNNING = threading.local()  # .call: the _Call a pool thread is running (None between calls)


# The main thread's running event loop while packs load in another thread (a server that listens
# before its packs import, web/pack_start.py): what only the main thread may do is handed to it.
_main_loop: contextvars.ContextVar[asyncio.AbstractEventLoop | None] = contextvars.ContextVar(
    "pack_isolation_main_loop", default=None)


@contextlib.contextmanager
def loading_beside_main_loop(loop: asyncio.AbstractEventLoop) -> Iterator[None]:
    """Around a load run outside the main thread while `loop` runs in it: a pack's
    `signal.signal()` is then done by the main thread, as when packs load there."""
    token = _main_loop.set(loop)
    try:
        yield
    finally:
        _main_loop.reset(token)


def on_main_thread(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` here, or on the main thread's loop (`loading_beside_main_loop`) from another thread."""
    loop = _main_loop.get()
    if loop is None or threading.current_thread() is threading.main_thread() or loop.is_closed():
        return fn(*args)
    done: "concurrent.futures.Future[T]" = concurrent.futures.Future()

    def run() -> None:
        try:
            done.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 -- raised again in the asking thread
            done.set_exception(exc)
    loop.call_soon_threadsafe(run)
    return done.result()


def _forwarding_signal(original: Callable[..., Any]) -> Callable[..., Any]:
    """`signal.signal` as pack code sees it while packs load: in a pool thread running a bounded
    call, the handler is set by the thread that waits for the call (the main thread when the
    host loads packs there, as ComfyUI does, so the pack's handler is set as it would be there)."""
    def signal_(signalnum: Any, handler: Any) -> Any:
        call = getattr(_RUNNING, "call", None)
        if call is not None and threading.current_thread() is not threading.main_thread():
            served, previous = call.in_waiting_thread(lambda: on_main_thread(original, signalnum, handler))
            if served:
                return previous
        return on_main_thread(original, signalnum, handler)
    signal_.__name__ = "signal"
    signal_.__doc__ = original.__doc__
    return signal_


class _Worker:
    """A daemon thread that runs the calls handed to it one at a time, then offers itself back
    to the pool (a stuck call keeps its worker; the pool starts another for the next call)."""

    def __init__(self, pool: "_Pool") -> None:
        self.pool = pool
        self.inbox: queue.SimpleQueue[_Call] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name="pack:idle", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        thread = threading.current_thread()
        while True:
            call = self.inbox.get()
            thread.name = f"pack:{call.label}"  # a stuck call shows up by name in thread dumps
            call.run_here()
            thread.name = "pack:idle"
            if not self.pool.put_back(self):
                return


class _Pool:
    """Reused helper threads: a thread start per INPUT_TYPES() call would cost more than most calls."""

    MAX_IDLE = 4

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []

    def submit(self, call: _Call) -> None:
        with self._lock:
            worker = self._idle.pop() if self._idle else None
        (worker or _Worker(self)).inbox.put(call)

    def put_back(self, worker: _Worker) -> bool:
        with self._lock:
            if len(self._idle) >= self.MAX_IDLE:
                return False
            self._idle.append(worker)
            return True


_POOL = _Pool()  # process-wide like the threads it holds; holds no behaviour
_ABANDONED: set[_Call] = set()  # abandoned calls still running


def abandoned_calls() -> list[_Call]:
    """The abandoned calls that are still running (`label`, `started`; `settled.wait()` waits for one)."""
    return list(_ABANDONED)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def caller_event_loop() -> asyncio.AbstractEventLoop | None:
    """The loop `asyncio.get_event_loop()` gives pack code run in the calling thread: the running
    one, else the one set for this thread, else (in the main thread, where asyncio would make one)
    a new one; None in another thread without a loop, where asyncio raises too."""
    loop = _running_loop()
    if loop is None:
        # the thread's set loop, read without making one (asyncio has no public reader for it)
        loop = getattr(getattr(asyncio.get_event_loop_policy(), "_local", None), "_loop", None)
    if loop is None and threading.current_thread() is threading.main_thread():
        loop = main_fallback_loop()
    return loop


def main_fallback_loop() -> asyncio.AbstractEventLoop:
    """The loop asyncio would have made for the main thread on a pack's first get_event_loop()
    (made once, kept for the process: packs hold on to what they got)."""
    global _MAIN_FALLBACK_LOOP
    with _FALLBACK_LOCK:
        if _MAIN_FALLBACK_LOOP is None or _MAIN_FALLBACK_LOOP.is_closed():
            _MAIN_FALLBACK_LOOP = asyncio.new_event_loop()
        return _MAIN_FALLBACK_LOOP


# The loop asyncio would have made for the main thread on a pack's first get_event_loop(): one,
# shared by every load, as the main thread's would be (never the server's loop, here or there).
_MAIN_FALLBACK_LOOP: asyncio.AbstractEventLoop | None = None
_FALLBACK_LOCK = threading.Lock()


def bounded(fn: Callable[[], T], limit: float | None, label: str, *,
            on_late: Callable[[_Call], None] | None = None, loop: asyncio.AbstractEventLoop | None = None) -> T:
    """`fn()` with at most `limit` seconds' wait (None: called here, unbounded).

    Raises what `fn` raises (also `SystemExit`), or `PackTimeoutError` once the wait is over;
    the call then goes on in its abandoned thread and `on_late(call)` runs there when it ends.
    `loop`: the helper thread's current event loop (default: the caller's running loop)."""
    if limit is None:
        return fn()
    call = _Call(fn, label, on_late, loop)
    if not call.wait(limit):
        raise PackTimeoutError(
            f"{label} did not return within {limit:g} s; abandoned: the call goes on running in a background "
            f"thread (Python cannot stop a thread) and whatever it returns is not used")
    if call.error is not None:
        raise call.error
    return call.value


class NodeCallGuard:
    """Calls of one pack node's declaration code (`INPUT_TYPES()`), bounded and reported.

    Every failure is logged with the pack and node names and kept in `errors[node]` (the
    pack's `PackResult.node_errors`, shown on GET /custom_nodes/status), then raised again so
    the caller leaves the node out (ComfyUI's /object_info) or fails the prompt's validation.
    While an abandoned call is still running, later calls fail at once instead of starting
    another stuck thread."""

    def __init__(self, pack: str, node: str, limit: float | None, errors: MutableMapping[str, str]) -> None:
        self.pack = pack
        self.node = node
        self.limit = limit
        self.errors = errors
        self._stuck: _Call | None = None

    def __call__(self, what: str, fn: Callable[[], T]) -> T:
        stuck = self._stuck
        if stuck is not None and not stuck.done.is_set():
            message = (f"{what} of node {self.node!r} is still running since its call "
                       f"{time.perf_counter() - stuck.started:.0f} s ago was abandoned; not called again until it "
                       f"returns")
            self._fail(message)
            raise PackTimeoutError(message)
        self._stuck = None
        label = f"custom node pack {self.pack}: {what} of node {self.node!r}"
        try:
            if self.limit is None:
                value = fn()
            else:
                call = _Call(fn, label, self._late)
                if not call.wait(self.limit):
                    self._stuck = call
                    raise PackTimeoutError(
                        f"{what} of node {self.node!r} did not return within {self.limit:g} s; abandoned (the call "
                        f"goes on running in a background thread, Python cannot stop a thread); the node is left "
                        f"out until it returns")
                if call.error is not None:
                    raise call.error
                value = call.value
        except PackTimeoutError as exc:
            self._fail(str(exc))
            raise
        except Exception as exc:
            self._fail(f"{what} raised {type(exc).__name__}: {exc}", traceback.format_exc())
            raise
        self.errors.pop(self.node, None)  # it works (again)
        return value

    def _fail(self, message: str, details: str = "") -> None:
        self.errors[self.node] = message
        log.error("custom node pack %s: node %r left out: %s%s", self.pack, self.node, message,
                  f"\n{details}" if details else "")

    def _late(self, call: _Call) -> None:
        log.warning("custom node pack %s: the abandoned call of %s returned after %.1f s%s", self.pack,
                    call.label, call.seconds, f" with {type(call.error).__name__}" if call.error else "")


class RegistryView:
    """The registry as one pack's registration code sees it: additions go through until the
    pack's loading is abandoned (`close()`), then raise `PackAbandonedError`."""

    def __init__(self, registry: Any, pack: str) -> None:
        self._registry = registry
        self._pack = pack
        self._closed = False

    @property
    def registry(self) -> Any:
        """The registry this view adds to."""
        return self._registry

    def close(self) -> None:
        self._closed = True

    def _check(self) -> None:
        if self._closed:
            raise PackAbandonedError(f"custom node pack {self._pack}: its loading was abandoned (it overran its "
                                     f"limit); nodes it registers afterwards are refused")

    def add_spec(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return self._registry.add_spec(*args, **kwargs)

    def add_v1(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return self._registry.add_v1(*args, **kwargs)

    def add_native(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return self._registry.add_native(*args, **kwargs)

    def replace_spec(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return self._registry.replace_spec(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # reading: find, get, specs, ...
        return getattr(self._registry, name)

    def __contains__(self, class_type: object) -> bool:
        return class_type in self._registry

    def __len__(self) -> int:
        return len(self._registry)

    def __iter__(self) -> Iterator[str]:
        return iter(self._registry)


# -- exits refused while packs import -------------------------------------------------------------

class _ExitGuard:
    """`os._exit` / `os.abort` replaced while at least one load is running (loads may overlap:
    two servers in one process); the importing threads are the ones refused. `signal.signal` is
    replaced for the same time by one that forwards a helper thread's call (`_forwarding_signal`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._originals: dict[str, Callable[..., Any]] = {}
        self._importing: dict[int, tuple[str, str]] = {}  # thread id -> (pack name, what of it runs)
        self._wrappers: dict[str, Callable[..., Any]] = {}

    def _wrapper(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def refuse(*args: Any) -> Any:
            running = self._importing.get(threading.get_ident())
            if running is None:
                return original(*args)
            pack, stage = running
            raise PackExitError(f"custom node pack {pack} called os.{name}{args!r} during its {stage}; refused "
                                f"(the server keeps running and the pack is marked as failed)")
        refuse.__name__ = name
        refuse.__doc__ = original.__doc__
        return refuse

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        with self._lock:
            if self._depth == 0:
                for name in ("_exit", "abort"):
                    original = getattr(os, name)
                    self._originals[name] = original
                    self._wrappers[name] = self._wrapper(name, original)
                    setattr(os, name, self._wrappers[name])
                self._originals["signal"] = signal.signal
                self._wrappers["signal"] = _forwarding_signal(signal.signal)
                signal.signal = self._wrappers["signal"]  # type: ignore[assignment]
            self._depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0:
                    for name, original in self._originals.items():
                        owner = signal if name == "signal" else os
                        if getattr(owner, name) is self._wrappers[name]:  # a pack's own replacement stays
                            setattr(owner, name, original)
                    self._originals.clear()
                    self._wrappers.clear()

    @contextlib.contextmanager
    def importing(self, pack: str, stage: str) -> Iterator[None]:
        """Marks the calling thread as running `pack`'s `stage` (its import, ...) for the block."""
        ident = threading.get_ident()
        self._importing[ident] = (pack, stage)
        try:
            yield
        finally:
            self._importing.pop(ident, None)


_EXITS = _ExitGuard()  # os._exit is process-wide, so its guard is too


def refuse_exits() -> contextlib.AbstractContextManager:
    """Around a whole load: `os._exit` / `os.abort` raise `PackExitError` in importing threads, and
    `signal.signal` from a bounded call's helper thread is done by the thread waiting for it."""
    return _EXITS.installed()


def importing(pack: str, stage: str = "import") -> contextlib.AbstractContextManager:
    """Around one pack's import code (or its prestartup script: `stage`), in the thread that runs it."""
    return _EXITS.importing(pack, stage)
