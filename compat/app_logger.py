"""ComfyUI's `app.logger` (its app/logger.py, 0.3.64 @a125cd84) over our server's log store.

ComfyUI's `setup_logger` replaces `sys.stdout` / `sys.stderr` with `LogInterceptor`s that keep the
last 300 writes in the module's `logs` deque, `{"t": ISO time, "m": text}` each; `get_logs()`
returns it (None before set-up), `on_flush(callback)` registers a function called with the
entries written since the last flush, and GET /internal/logs serves them. Here the server keeps
that store itself: the served app's `LogBuffer` (web/routes_logs.py, `AppState.log_buffer`), fed
by the logging records and the teed console from start-up, in ComfyUI's entry shape. So:

- `get_logs()` is that store's entries, oldest first, as a `deque` with its capacity (a copy: the
  live one is written from other threads); None where no server runs (a headless run), as
  ComfyUI's before `setup_logger`. `logs` reads the same.
- `on_flush(callback)` makes the store call `callback(entries)` with each new entry (a list of
  one: the console is teed per write, so every write is its own flush); without a server it
  registers nothing, as ComfyUI's without interceptors.
- `setup_logger(...)` does nothing: the host set logging and the store up at start (ComfyUI's
  answer to a second call). `stdout_interceptor` / `stderr_interceptor` are None (the tee is the
  server's own, web/routes_logs.py `ConsoleTee`).
- `LogInterceptor(stream)` is ComfyUI's stream wrapper: what it writes goes to `stream` and into
  the store, and its own `on_flush` callbacks get what was written since its last flush.
- `STARTUP_WARNINGS`, `log_startup_warning`, `print_startup_warnings` are ComfyUI's.
"""
from __future__ import annotations

import io
import logging
import threading
from collections import deque
from datetime import datetime
from typing import Any, Callable

STARTUP_WARNINGS: list[str] = []


def _store() -> Any:
    """The served app's `LogBuffer`, or None when no server is bound to the active session."""
    from compat import active

    try:
        session = active.active()
    except active.CompatNotInstalledError:
        return None
    return getattr(getattr(session, "state", None), "log_buffer", None)


def get_logs() -> deque | None:
    """The server's recent log entries (`{"t", "m"}`, oldest first), or None without a server."""
    store = _store()
    if store is None:
        return None
    return deque(store.snapshot(), maxlen=store.entries.maxlen)


def on_flush(callback: Callable[[list[dict]], Any]) -> None:
    """Call `callback(entries)` with each new log entry of the server (none without a server)."""
    store = _store()
    if store is not None:
        store.listeners.append(callback)


def setup_logger(log_level: str = "INFO", capacity: int = 300, use_stdout: bool = False) -> None:
    """Nothing to do: the host set up logging and the log store when it started."""


def log_startup_warning(msg: str) -> None:
    logging.warning(msg)
    STARTUP_WARNINGS.append(msg)


def print_startup_warnings() -> None:
    for warning in STARTUP_WARNINGS:
        logging.warning(warning)
    STARTUP_WARNINGS.clear()


def module_global(module: str, name: str) -> Any:
    """ComfyUI's module globals of app.logger, answered when read."""
    if name == "logs":
        return get_logs()
    if name in ("stdout_interceptor", "stderr_interceptor"):
        return None
    raise AttributeError(f"module {module!r} has no attribute {name!r}")


class LogInterceptor(io.TextIOWrapper):
    """ComfyUI's stream wrapper: writes go to the wrapped stream and into the server's log store
    (a write starting with "\\r" replaces an entry that did not end its line, as there); `flush`
    hands the entries written since the last flush to the `on_flush` callbacks."""

    def __init__(self, stream: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(stream.buffer, *args, encoding=stream.encoding, line_buffering=stream.line_buffering,
                         **kwargs)
        self._lock = threading.Lock()
        self._flush_callbacks: list[Callable[[list[dict]], Any]] = []
        self._logs_since_flush: list[dict] = []

    def write(self, data: str) -> int:
        with self._lock:
            self._logs_since_flush.append({"t": datetime.now().isoformat(), "m": data})
        store = _store()
        if store is not None and isinstance(data, str) and data:
            store.add_text(data)
        return super().write(data)

    def flush(self) -> None:
        super().flush()
        for callback in self._flush_callbacks:
            with self._lock:
                entries, self._logs_since_flush = self._logs_since_flush, []
            callback(entries)

    def on_flush(self, callback: Callable[[list[dict]], Any]) -> None:
        self._flush_callbacks.append(callback)
