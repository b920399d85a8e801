"""The editor's Logs tab: the recent log in memory and ComfyUI's internal logs routes.

A `LogBuffer` is a logging handler on the root logger that keeps the last `LOG_CAPACITY`
records (ComfyUI keeps 300 console writes) as ComfyUI's entries, `{"t": ISO time, "m": text}`,
where `m` is the line as the console shows it, newline included (the editor writes the `m`s
into its terminal as they are). Clients that subscribed get each new batch of entries as a
WebSocket message `{"type": "logs", "data": {"entries": [...], "size": null}}`.

Routes (shapes after ComfyUI's api_server/routes/internal/internal_routes.py and
api_server/services/terminal_service.py, comfyanonymous/ComfyUI @4195dfb0 / @06efba1b;
app/logger.py @c828fdcf):
  GET   /internal/logs            one JSON string: every entry as "<t> - <m>", concatenated
  GET   /internal/logs/raw        {"entries": [{"t", "m"}...], "size": {"cols", "rows"}}
  PATCH /internal/logs/subscribe  body {"clientId": str, "enabled": bool} -> 200, empty body

Two sources feed the entries. The logging records (the console handlers main.py installs write to
the streams they were given, so a record is one entry, not two). And, as ComfyUI's app/logger.py
does, everything written to `sys.stdout` / `sys.stderr` while the server runs: packs' `print`s,
tqdm bars. `ConsoleTee` replaces both streams from the app's start-up until its clean-up (the
server host's lifetime, `log_routes`); each write goes to the stream it replaced first (the
console never loses a line, and a failing write fails as before), then becomes one entry with
the text as written (ComfyUI's: `print("x")` is the entries "x" and "\\n"; a write starting with
"\\r" replaces the previous entry when that one did not end a line, so progress bars do not fill
the buffer). Writes come from any thread (the queue worker's, packs' own); the buffer's lock
orders them. At clean-up a tee puts its stream back when it is still `sys.stdout`/`sys.stderr`,
and otherwise (something wrapped it since) only stops recording and keeps passing writes on.

A subscriber whose socket is gone is dropped at the next batch, as in ComfyUI. Entries added while
a batch is being sent are kept but not sent on (a log line from the sending itself would
otherwise loop).
"""
from __future__ import annotations

import logging
import shutil
import sys
import threading
from collections import deque
from datetime import datetime
from typing import Any, Callable, TextIO

from aiohttp import web

from web.auth.access import admin_only
from web.bodies import BadRequestBody, read_json
from web.state import STATE_KEY

LOG_CAPACITY = 300
_FORMATTER = logging.Formatter("%(message)s")  # ComfyUI's console format


def terminal_size() -> dict:
    """The server's console size, as ComfyUI reports it (80x24 when there is no console)."""
    size = shutil.get_terminal_size((80, 24))
    return {"cols": size.columns, "rows": size.lines}


class LogBuffer(logging.Handler):
    """The last `capacity` log entries, and the client ids that get new ones over the hub.

    `emit` runs on any thread; sending happens on the hub's event loop, one message per batch
    of entries logged since the last send."""

    def __init__(self, hub: Any, capacity: int = LOG_CAPACITY) -> None:
        super().__init__(logging.NOTSET)
        self.setFormatter(_FORMATTER)
        self.hub = hub
        self.entries: deque[dict] = deque(maxlen=capacity)
        self.subscribers: set[str] = set()
        self._pending: list[dict] = []
        self._flush_scheduled = False
        self._buffer_lock = threading.Lock()
        self._sending = threading.local()
        # functions(list of entries) called with each new entry (ComfyUI's app.logger.on_flush)
        self.listeners: list[Callable[[list[dict]], None]] = []
        self._notifying = threading.local()

    # -- logging.Handler ---------------------------------------------------------------------
    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
        except Exception:  # noqa: BLE001 -- a bad record must not break logging
            self.handleError(record)
            return
        self._add({"t": datetime.fromtimestamp(record.created).isoformat(), "m": text + "\n"})

    # -- console writes (ConsoleTee) ------------------------------------------------------------
    def add_text(self, text: str) -> None:
        """One write to stdout/stderr as an entry (see the module docstring for "\\r")."""
        self._add({"t": datetime.now().isoformat(), "m": text}, overwrite=text.startswith("\r"))

    def _add(self, entry: dict, overwrite: bool = False) -> None:
        self._store(entry, overwrite)
        if self.listeners and not getattr(self._notifying, "active", False):
            self._notifying.active = True  # a listener's own output is not fed back to it
            try:
                for listener in list(self.listeners):
                    listener([entry])
            finally:
                self._notifying.active = False

    def _store(self, entry: dict, overwrite: bool) -> None:
        forward = not getattr(self._sending, "active", False)
        with self._buffer_lock:
            if overwrite and self.entries and not self.entries[-1]["m"].endswith("\n"):
                self.entries.pop()
            self.entries.append(entry)
            if not forward or not self.subscribers:
                return
            self._pending.append(entry)
            if self._flush_scheduled:
                return
            self._flush_scheduled = True
        loop = self.hub.loop
        if loop is None or loop.is_closed():
            with self._buffer_lock:
                self._pending.clear()
                self._flush_scheduled = False
            return
        try:
            loop.call_soon_threadsafe(self._flush)
        except RuntimeError:  # the loop closed in between
            with self._buffer_lock:
                self._pending.clear()
                self._flush_scheduled = False

    # -- on the event loop -------------------------------------------------------------------
    def _flush(self) -> None:
        with self._buffer_lock:
            batch, self._pending = self._pending, []
            self._flush_scheduled = False
        if not batch:
            return
        self._sending.active = True
        try:
            for client_id in list(self.subscribers):
                if client_id not in self.hub.clients:
                    self.subscribe(client_id, False)  # its socket is gone (ComfyUI: auto-unsubscribe)
                    continue
                self.hub.send("logs", {"entries": batch, "size": None}, client_id)
        finally:
            self._sending.active = False

    def snapshot(self) -> list[dict]:
        with self._buffer_lock:
            return list(self.entries)

    def subscribe(self, client_id: str, enabled: bool) -> None:
        with self._buffer_lock:
            if enabled:
                self.subscribers.add(client_id)
            else:
                self.subscribers.discard(client_id)


class ConsoleTee:
    """`sys.stdout` or `sys.stderr` while a server runs: writes go to `original`, then to the
    buffer (see the module docstring). Everything else is the original stream's."""

    def __init__(self, original: TextIO, buffer: LogBuffer) -> None:
        self.original = original
        self._buffer = buffer
        self.recording = True

    def write(self, text: str) -> int:
        written = self.original.write(text)
        if self.recording and isinstance(text, str) and text:
            self._buffer.add_text(text)
        return written

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self.original.flush()

    def __getattr__(self, name: str) -> Any:  # encoding, isatty, fileno, buffer, ...
        return getattr(self.original, name)


def install_console_tee(buffer: LogBuffer) -> Callable[[], None]:
    """Tee `sys.stdout` and `sys.stderr` into `buffer`; returns the function that undoes it. A
    stream that is None (no console: pythonw, some services) stays None, as print expects."""
    tees = {name: ConsoleTee(getattr(sys, name), buffer) for name in ("stdout", "stderr")
            if getattr(sys, name) is not None}
    for name, tee in tees.items():
        setattr(sys, name, tee)

    def restore() -> None:
        for name, tee in tees.items():
            tee.recording = False
            if getattr(sys, name) is tee:
                setattr(sys, name, tee.original)
    return restore


LOG_BUFFER_KEY: web.AppKey[LogBuffer] = web.AppKey("comfy_engine_log_buffer", LogBuffer)


def log_routes(app: web.Application) -> web.RouteTableDef:
    """The internal logs routes of `app` (whose state is already set). Its `LogBuffer` is on the
    root logger, and the console is teed into it, from the app's start-up until its clean-up."""
    buffer = LogBuffer(app[STATE_KEY].hub)
    app[LOG_BUFFER_KEY] = buffer
    app[STATE_KEY].log_buffer = buffer  # what packs' app.logger reads (compat/app_logger.py)
    undo: list[Callable[[], None]] = []

    async def attach(_: web.Application) -> None:
        logging.getLogger().addHandler(buffer)
        undo.append(install_console_tee(buffer))

    async def detach(_: web.Application) -> None:
        while undo:
            undo.pop()()
        logging.getLogger().removeHandler(buffer)

    app.on_startup.append(attach)
    app.on_cleanup.append(detach)
    routes = web.RouteTableDef()

    @routes.get("/internal/logs")
    @admin_only  # --users (web/auth/): the server's log shows every user's prompts
    async def get_logs(request: web.Request) -> web.Response:
        return web.json_response("".join(f"{e['t']} - {e['m']}" for e in buffer.snapshot()))

    @routes.get("/internal/logs/raw")
    @admin_only
    async def get_raw_logs(request: web.Request) -> web.Response:
        return web.json_response({"entries": buffer.snapshot(), "size": terminal_size()})

    @routes.patch("/internal/logs/subscribe")
    @admin_only
    async def subscribe_logs(request: web.Request) -> web.Response:
        body = await read_json(request, expect=dict)
        client_id, enabled = body.get("clientId"), body.get("enabled")
        if not isinstance(client_id, str) or not client_id:
            raise BadRequestBody("'clientId' must be the WebSocket's client id (a non-empty string)",
                                 "invalid_request")
        if not isinstance(enabled, bool):
            raise BadRequestBody("'enabled' must be true or false", "invalid_request")
        buffer.subscribe(client_id, enabled)
        return web.Response(status=200)

    return routes
