"""The WebSocket hub: connected clients by client id, ordered delivery, reconnect catch-up.

Each client has an outbox (an asyncio queue) drained by its own writer task, so messages reach a
client in the order they were sent and one slow client never holds up the others.

Routing (ComfyUI's, minus its broadcast of other clients' progress): a message with a client id
goes to that client only; a message without one goes to every client (`status`, packs' global
events). While a prompt runs, messages for its owner that find no socket (the page is
reloading, the network blipped) are kept, up to `MISSED_LIMIT`, and delivered when a socket with
the same client id connects again, so the client sees the rest of its prompt.

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

from web.protocol import binary_frame, json_message

log = logging.getLogger(__name__)

# A text frame, a binary frame, or a future of a binary frame still being encoded (None: skip).
Outgoing = Union[str, bytes, "asyncio.Future[bytes | None]"]

OUTBOX_LIMIT = 10000
MISSED_LIMIT = 5000


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
        # The running prompt, for reconnect catch-up.
        self.owner: str | None = None
        self.owner_prompt_id: str | None = None
        self.last_node: str | None = None
        # What the owner of the latest prompt missed, kept until the next prompt starts so that a
        # client that comes back just after its prompt ended still gets the end of it.
        self._missed: deque[Outgoing] = deque(maxlen=MISSED_LIMIT)
        self._missed_for: str | None = None

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._loop_thread = threading.get_ident()

    # -- sending -----------------------------------------------------------------------------
    def send(self, event_type: str | int, data: Any, client_id: str | None = None) -> None:
        """Queue a JSON event (str type) or a binary frame (int type, bytes data). Loop thread only."""
        if isinstance(event_type, int):
            if not isinstance(data, (bytes, bytearray)):
                raise TypeError(f"binary event {event_type} needs bytes data, got {type(data).__name__}")
            message: str | bytes = binary_frame(event_type, bytes(data))
        else:
            message = json_message(event_type, data)
        self.send_raw(message, client_id)

    def send_raw(self, message: "Outgoing", client_id: str | None = None) -> None:
        """Queue an encoded message; a future (bytes or None) is sent when done, in its place."""
        if client_id is None:
            for conn in list(self.clients.values()):
                self._enqueue(conn, message)
            return
        conn = self.clients.get(client_id)
        if conn is not None:
            self._enqueue(conn, message)
        elif client_id == self.owner:
            self._missed.append(message)

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
        if conn.client_id == self._missed_for:
            self._missed.append(unsent)
            while not conn.outbox.empty():
                self._missed.append(conn.outbox.get_nowait())

    # -- connections -------------------------------------------------------------------------
    def connect(self, client_id: str, ws: web.WebSocketResponse) -> ClientConnection:
        """Register a socket (replacing any older one with the same id) and greet it."""
        conn = ClientConnection(client_id, ws)
        conn.writer = asyncio.get_running_loop().create_task(self._drain(conn))
        self.clients[client_id] = conn
        self._enqueue(conn, json_message("status", {"status": self.status_data(), "sid": client_id}))
        missed: list[Outgoing] = []
        if client_id == self._missed_for:
            missed = list(self._missed)
            self._missed.clear()
            for message in missed:
                self._enqueue(conn, message)
        if client_id == self.owner:
            if not missed and self.last_node is not None:
                self._enqueue(conn, json_message("executing", {"node": self.last_node, "display_node": self.last_node,
                                                               "prompt_id": self.owner_prompt_id}))
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
        if not replaced and conn.client_id == self._missed_for:
            while not conn.outbox.empty():  # queued but never sent: keep for a reconnect
                self._missed.append(conn.outbox.get_nowait())

    async def close_all(self) -> None:
        for conn in list(self.clients.values()):
            await conn.ws.close(code=1001, message=b"server shutdown")
            await self.disconnect(conn)

    # -- the running prompt ------------------------------------------------------------------
    def begin_prompt(self, client_id: str | None, prompt_id: str) -> None:
        self.owner, self.owner_prompt_id, self.last_node = client_id, prompt_id, None
        self._missed.clear()
        self._missed_for = client_id

    def note_executing(self, node: str | None) -> None:
        self.last_node = node

    def end_prompt(self) -> None:
        self.owner = self.owner_prompt_id = self.last_node = None
