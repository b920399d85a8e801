"""The WebSocket hub: connected clients by client id, ordered delivery, reconnect catch-up.

Each client has an outbox (an asyncio queue) drained by its own writer task, so messages reach a
client in the order they were sent and one slow client never holds up the others.

Routing (ComfyUI's, minus its broadcast of other clients' progress): a message with a client id
goes to that client only; a message without one goes to every client (`status`, packs' global
events). While a prompt runs, messages for its owner that find no socket (the page is
reloading, the network blipped) are kept, up to `MISSED_LIMIT`, and delivered when a socket with
the same client id connects again, so the client sees the rest of its prompt. This holds for
each running prompt (with --ray several run at once, each for its own client), and what a
client missed of its latest prompt is kept after that prompt ends (for the `ENDED_KEPT` clients
whose prompts ended last), until its next prompt starts.

All methods run on the event loop except `send_threadsafe`.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Union

from aiohttp import web

from graph.events import Event
from graph.progress import ProgressStateEvent, entries_of
from web.protocol import binary_frame, json_message, json_message_chunked

log = logging.getLogger(__name__)

# Maps with more entries than this are encoded in a worker thread, in pieces (issue 34).
OFF_LOOP_ENTRIES = 2000


class Deferred:
    """An event kept for a client without a socket, encoded only if it is ever delivered (on
    reconnect). A newer `progress_state` of the same prompt supersedes it (its map replaces the
    client's whole view, so an older one is never worth encoding)."""

    __slots__ = ("event", "superseded")

    def __init__(self, event: Event) -> None:
        self.event = event
        self.superseded = False


# A text frame, a binary frame, a future of a frame still being encoded (None: skip), or an
# event kept for a reconnect and encoded when it is sent.
Outgoing = Union[str, bytes, "asyncio.Future[str | bytes | None]", Deferred]

OUTBOX_LIMIT = 10000
MISSED_LIMIT = 5000  # messages kept per client
ENDED_KEPT = 16  # clients whose prompt ended and whose missed messages are still kept


@dataclass
class RunningPrompt:
    """A running prompt, for reconnect catch-up: its client and the node it runs."""

    client_id: str | None
    last_node: str | None = None


@dataclass(eq=False)
class ClientConnection:
    client_id: str
    ws: web.WebSocketResponse
    feature_flags: dict = field(default_factory=dict)
    outbox: asyncio.Queue = field(default_factory=lambda: asyncio.Queue(OUTBOX_LIMIT))
    writer: asyncio.Task | None = None

    @property
    def supports_preview_metadata(self) -> bool:
        return bool(self.feature_flags.get("supports_preview_metadata"))


class WebSocketHub:
    def __init__(self, status_data: Callable[[], dict]) -> None:
        # status_data() -> {"exec_info": {"queue_remaining": N}}
        self.status_data = status_data
        self.clients: dict[str, ClientConnection] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        # The running prompts by id, for reconnect catch-up.
        self.running: dict[str, RunningPrompt] = {}
        # What each client that owns a running prompt (or owned one of the latest ended) missed;
        # kept until its next prompt starts, so that a client that comes back just after its
        # prompt ended still gets the end of it. Insertion order: the oldest ended go first.
        self._missed: dict[str, deque[Outgoing]] = {}
        # The latest progress_state kept for each (client, prompt): superseded by the next one.
        self._kept_progress: dict[tuple[str, str], Deferred] = {}

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._loop_thread = threading.get_ident()

    # -- sending -----------------------------------------------------------------------------
    def send(self, event_type: str | int, data: Any, client_id: str | None = None) -> None:
        """Queue a JSON event (str type) or a binary frame (int type, bytes data). Loop thread only."""
        if client_id is not None and client_id not in self.clients and not self._owns_running(client_id):
            return  # nobody will read it: not encoded
        if isinstance(event_type, int):
            if not isinstance(data, (bytes, bytearray)):
                raise TypeError(f"binary event {event_type} needs bytes data, got {type(data).__name__}")
            message: str | bytes = binary_frame(event_type, bytes(data))
        else:
            message = json_message(event_type, data)
        self.send_raw(message, client_id)

    def send_event(self, event: Event, client_id: str | None) -> None:
        """Queue an engine event for `client_id` (None: everyone). Nothing is encoded, and a lazy
        `progress_state` map is not even built, for a client without a socket: the event is
        dropped, or kept unencoded for a reconnect while the client owns a running prompt. A big
        map is encoded in a worker thread (`OFF_LOOP_ENTRIES`), in its place in the order."""
        if client_id is not None and client_id not in self.clients:
            if self._owns_running(client_id):
                deferred = Deferred(event)
                if isinstance(event, ProgressStateEvent):
                    key = (client_id, event.prompt_id)
                    older = self._kept_progress.get(key)
                    if older is not None:
                        older.superseded = True
                    self._kept_progress[key] = deferred
                self._missed[client_id].append(deferred)
            return
        self.send_raw(self._encode(event), client_id)

    def _encode(self, event: Event) -> "Outgoing":
        if self.loop is not None and event.type == "progress_state" and entries_of(event) > OFF_LOOP_ENTRIES:
            return self.loop.run_in_executor(None, _encode_big, event)
        return json_message(event.type, event.data)

    def send_raw(self, message: "Outgoing", client_id: str | None = None) -> None:
        """Queue an encoded message; a future (bytes or None) is sent when done, in its place."""
        if client_id is None:
            for conn in list(self.clients.values()):
                self._enqueue(conn, message)
            return
        conn = self.clients.get(client_id)
        if conn is not None:
            self._enqueue(conn, message)
        elif self._owns_running(client_id):
            self._missed[client_id].append(message)

    def send_threadsafe(self, event_type: str | int, data: Any, client_id: str | None = None) -> None:
        """`send` from any thread (node code, packs' send_sync)."""
        self.call_on_loop(self.send, event_type, data, client_id)

    def call_on_loop(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run `fn(*args)` on the loop: now if called there, else scheduled (FIFO keeps order)."""
        if self.loop is None or threading.get_ident() == self._loop_thread:
            fn(*args)
        else:
            self.loop.call_soon_threadsafe(fn, *args)

    def broadcast_status(self) -> None:
        self.send("status", {"status": self.status_data()})

    def client(self, client_id: str | None) -> ClientConnection | None:
        return self.clients.get(client_id) if client_id is not None else None

    def _enqueue(self, conn: ClientConnection, message: Outgoing) -> None:
        try:
            conn.outbox.put_nowait(message)
        except asyncio.QueueFull:
            log.warning("client %s is not reading; a message was dropped", conn.client_id)

    async def _drain(self, conn: ClientConnection) -> None:
        while True:
            message = await conn.outbox.get()
            try:
                if isinstance(message, Deferred):  # kept for this reconnect: encoded now
                    if message.superseded:
                        continue
                    message = self._encode(message.event)
                if isinstance(message, asyncio.Future):
                    message = await message
                    if message is None:
                        continue
                if conn.ws.closed:
                    raise ConnectionResetError("socket closed")
                if isinstance(message, bytes):
                    await conn.ws.send_bytes(message)
                else:
                    await conn.ws.send_str(message)
            except (ConnectionError, RuntimeError) as exc:
                log.debug("send to %s failed: %s", conn.client_id, exc)
                self._orphan(conn, message)
                return

    def _orphan(self, conn: ClientConnection, unsent: Outgoing) -> None:
        """A socket died: unregister it now, and keep what it did not get if it owns the running
        prompt, so that a reconnect with the same id still receives it."""
        if self.clients.get(conn.client_id) is conn:
            del self.clients[conn.client_id]
        missed = self._missed.get(conn.client_id)
        if missed is not None:
            missed.append(unsent)
            while not conn.outbox.empty():
                missed.append(conn.outbox.get_nowait())

    # -- connections -------------------------------------------------------------------------
    def connect(self, client_id: str, ws: web.WebSocketResponse) -> ClientConnection:
        """Register a socket (replacing any older one with the same id) and greet it."""
        conn = ClientConnection(client_id, ws)
        conn.writer = asyncio.get_running_loop().create_task(self._drain(conn))
        self.clients[client_id] = conn
        self._enqueue(conn, json_message("status", {"status": self.status_data(), "sid": client_id}))
        missed: list[Outgoing] = []
        if client_id in self._missed:
            missed = list(self._missed[client_id])
            self._missed[client_id].clear()
            for message in missed:
                self._enqueue(conn, message)
        if not missed:  # nothing kept: at least say where its running prompts are
            for prompt_id, running in self.running.items():
                if running.client_id == client_id and running.last_node is not None:
                    self._enqueue(conn, json_message("executing", {"node": running.last_node,
                                                                   "display_node": running.last_node,
                                                                   "prompt_id": prompt_id}))
        return conn

    async def disconnect(self, conn: ClientConnection) -> None:
        replaced = self.clients.get(conn.client_id) is not conn
        if not replaced:
            del self.clients[conn.client_id]
        if conn.writer is not None:
            conn.writer.cancel()
            try:
                await conn.writer
            except (asyncio.CancelledError, Exception):
                pass
        missed = self._missed.get(conn.client_id)
        if not replaced and missed is not None:
            while not conn.outbox.empty():  # queued but never sent: keep for a reconnect
                missed.append(conn.outbox.get_nowait())

    async def close_all(self) -> None:
        for conn in list(self.clients.values()):
            await conn.ws.close(code=1001, message=b"server shutdown")
            await self.disconnect(conn)

    # -- the running prompts -----------------------------------------------------------------
    def begin_prompt(self, client_id: str | None, prompt_id: str) -> None:
        if client_id is not None and not self._owns_running(client_id):
            # Its previous prompt's leftovers go; it is now the newest (ended last, kept longest).
            self._missed.pop(client_id, None)
            self._forget_progress(client_id)
            self._missed[client_id] = deque(maxlen=MISSED_LIMIT)
        self.running[prompt_id] = RunningPrompt(client_id)

    def note_executing(self, prompt_id: str, node: str | None) -> None:
        running = self.running.get(prompt_id)
        if running is not None:
            running.last_node = node

    def end_prompt(self, prompt_id: str) -> None:
        running = self.running.pop(prompt_id, None)
        if running is None or running.client_id is None or self._owns_running(running.client_id):
            return
        missed = self._missed.pop(running.client_id, None)
        if missed is not None:
            self._missed[running.client_id] = missed  # (re)inserted last: ended most recently
        ended = [cid for cid in self._missed if not self._owns_running(cid)]
        for client_id in ended[:max(0, len(ended) - ENDED_KEPT)]:
            del self._missed[client_id]
            self._forget_progress(client_id)

    def _forget_progress(self, client_id: str) -> None:
        for key in [k for k in self._kept_progress if k[0] == client_id]:
            del self._kept_progress[key]

    def kept_for(self, client_id: str) -> list[Outgoing]:
        """What is kept for `client_id` until it connects again (tests watch it)."""
        return list(self._missed.get(client_id, ()))

    def _owns_running(self, client_id: str | None) -> bool:
        return client_id is not None and any(r.client_id == client_id for r in self.running.values())


def _encode_big(event: Event) -> str:
    """A big `progress_state` as JSON text, in a worker thread: the map is built here (readers of
    graph/versions.py maps may be any thread) and encoded in pieces (web/protocol.py)."""
    data = event.data
    if isinstance(data, dict) and isinstance(data.get("nodes"), dict):
        return json_message_chunked(event.type, data)
    return json_message(event.type, data)
