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

A client that reads gets every message, as ComfyUI sends every message (its server.py queues
them without bound and its progress.py sends a `progress_state` on every node change). While a
client is `COALESCE_BACKLOG` messages behind (its writer is still sending older ones, e.g. a
100 000-node map) the outbox drops only what a newer queued message makes useless: a newer
`progress_state` of the same prompt replaces a queued older one (its map replaces the client's
whole view; ComfyUI's frontend keeps only the latest per animation frame anyway), and a
`progress` of a node replaces the queued `progress` of the same node when nothing but progress
messages came between. A client that keeps up sees every message, as in ComfyUI. `executing`, `executed`, `execution_*`,
binary previews and everything else are always sent, in order. The count limit (`OUTBOX_LIMIT`)
protects the server only from a client that has stopped reading: messages past it are dropped
only while the writer has not finished a send for `STALL_SECONDS` (or past `OUTBOX_HARD_LIMIT`,
a memory bound that a reading client does not reach).

All methods run on the event loop except `send_threadsafe`.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
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
    """An event encoded only when a client's writer reaches it: a lazy `progress_state` queued
    for a client, or any event kept for a client without a socket (delivered on reconnect). A
    newer `progress_state` of the same prompt supersedes a kept one (its map replaces the client's
    whole view, so an older one is never worth encoding)."""

    __slots__ = ("event", "superseded")

    def __init__(self, event: Event) -> None:
        self.event = event
        self.superseded = False


# A text frame, a binary frame, a future of a frame still being encoded (None: skip), or an
# event kept for a reconnect and encoded when it is sent.
Outgoing = Union[str, bytes, "asyncio.Future[str | bytes | None]", Deferred]

OUTBOX_LIMIT = 10000  # queued messages past which a client that has stopped reading loses them
OUTBOX_HARD_LIMIT = 1_000_000  # past this even a client that still reads loses messages (memory)
COALESCE_BACKLOG = 64  # queued messages from which a newer progress message replaces an older one
STALL_SECONDS = 30.0  # a writer that finished no send for this long: its client is not reading
MISSED_LIMIT = 5000  # messages kept per client
ENDED_KEPT = 16  # clients whose prompt ended and whose missed messages are still kept


class _Queued:
    """One message in an outbox; `superseded` once a newer message made it useless."""

    __slots__ = ("message", "key", "superseded")

    def __init__(self, message: Outgoing, key: tuple | None) -> None:
        self.message = message
        self.key = key
        self.superseded = False


class Outbox:
    """A client's messages waiting for its writer, in order, with superseded progress messages
    dropped while they wait (see the module doc). Loop thread only.

    `key` of a message: `("progress_state", prompt_id)`, `("progress", prompt_id, node)`, or
    None for every message that is always sent.
    """

    def __init__(self, limit: int = OUTBOX_LIMIT, *, hard_limit: int = OUTBOX_HARD_LIMIT,
                 coalesce_backlog: int = COALESCE_BACKLOG, stall_seconds: float = STALL_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.coalesce_backlog = coalesce_backlog
        self.hard_limit = max(limit, hard_limit)
        self.stall_seconds = stall_seconds
        self.clock = clock
        self._items: deque[_Queued] = deque()
        self._live = 0  # items not superseded
        self._ready = asyncio.Event()
        self._states: dict[Any, _Queued] = {}  # the queued progress_state of each prompt
        self._progress_run: dict[tuple, _Queued] = {}  # `progress` queued since the last other message
        self._busy = False  # the writer holds a message it has not finished sending
        self._moved_at = clock()  # the writer's last finished send (or when it had nothing to do)
        self.dropped = 0
        self.superseded = 0

    def __len__(self) -> int:
        return self._live

    def put(self, message: Outgoing, key: tuple | None = None) -> bool:
        """Queue `message`; False when it was dropped because the client is not reading."""
        now = self.clock()
        if self._live == 0 and not self._busy:
            self._moved_at = now  # nothing was waiting: the stall clock starts now
        kind = key[0] if key is not None else None
        if self._live >= self.coalesce_backlog:
            if kind == "progress_state":
                self._supersede(self._states.get(key))
            elif kind == "progress":
                self._supersede(self._progress_run.get(key))
        if self._live >= self.limit and (self._live >= self.hard_limit or now - self._moved_at > self.stall_seconds):
            self.dropped += 1
            return False
        item = _Queued(message, key)
        if kind == "progress_state":
            self._states[key] = item
        elif kind == "progress":
            self._progress_run[key] = item
        else:
            self._progress_run.clear()  # a later `progress` no longer replaces the earlier ones
        self._items.append(item)
        self._live += 1
        self._ready.set()
        return True

    def _supersede(self, item: _Queued | None) -> None:
        if item is None or item.superseded:
            return
        item.superseded = True
        self._live -= 1
        self.superseded += 1
        if isinstance(item.message, asyncio.Future):
            item.message.cancel()

    async def get(self) -> Outgoing:
        """The next message to send (waits for one); call `sent()` once it is sent."""
        while True:
            while not self._items:
                self._ready.clear()
                await self._ready.wait()
            item = self._items.popleft()
            if item.superseded:
                continue
            self._live -= 1
            self._forget(item)
            self._busy = True
            return item.message

    def stalled_for(self) -> float:
        """Seconds since the writer last finished a send while messages wait (0: none waits)."""
        return self.clock() - self._moved_at if (self._live or self._busy) else 0.0

    def sent(self) -> None:
        """The writer finished sending (or skipping) the message it took."""
        self._busy = False
        self._moved_at = self.clock()

    def take_all(self) -> list[Outgoing]:
        """Every message still queued (not superseded), in order; the outbox is left empty."""
        messages = [item.message for item in self._items if not item.superseded]
        self._items.clear()
        self._states.clear()
        self._progress_run.clear()
        self._live = 0
        return messages

    def _forget(self, item: _Queued) -> None:
        key = item.key
        if key is None:
            return
        table = self._states if key[0] == "progress_state" else self._progress_run
        if table.get(key) is item:
            del table[key]


def message_key(event_type: str | int, data: Any) -> tuple | None:
    """The supersession key of a message (see `Outbox`): None for every message always sent."""
    if event_type == "progress_state" and isinstance(data, dict):
        return ("progress_state", data.get("prompt_id"))
    if event_type == "progress" and isinstance(data, dict):
        return ("progress", data.get("prompt_id"), data.get("node"))
    return None


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
    outbox: Outbox = field(default_factory=Outbox)
    writer: asyncio.Task | None = None

    @property
    def supports_preview_metadata(self) -> bool:
        return bool(self.feature_flags.get("supports_preview_metadata"))


class WebSocketHub:
    def __init__(self, status_data: Callable[[], dict], *, outbox_limit: int = OUTBOX_LIMIT,
                 coalesce_backlog: int = COALESCE_BACKLOG, stall_seconds: float = STALL_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        # status_data() -> {"exec_info": {"queue_remaining": N}}
        self.status_data = status_data
        self.outbox_limit = outbox_limit
        self.coalesce_backlog = coalesce_backlog
        self.stall_seconds = stall_seconds
        self.clock = clock
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
        # --users: `on_outputs(owner, executed_data)` for every `executed` message of a prompt
        # (web/prompt_run.py calls it), so /view lets the owner read the files (web/auth/service.py).
        self.on_outputs: Callable[[str, Any], None] | None = None

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
        self.send_raw(message, client_id, message_key(event_type, data))

    def send_event(self, event: Event, client_id: str | None) -> None:
        """Queue an engine event for `client_id` (None: everyone). Nothing is encoded, and a lazy
        `progress_state` map is not even built, for a client without a socket: the event is
        dropped, or kept unencoded for a reconnect while the client owns a running prompt. A lazy
        map is encoded only when the client's writer reaches it (so one that a newer map
        supersedes in the outbox is never encoded); a big one in a worker thread
        (`OFF_LOOP_ENTRIES`)."""
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
        if isinstance(event, ProgressStateEvent):
            self.send_raw(Deferred(event), client_id, ("progress_state", event.prompt_id))
            return
        self.send_raw(self._encode(event), client_id, message_key(event.type, event.data))

    def _encode(self, event: Event) -> "Outgoing":
        if self.loop is not None and event.type == "progress_state" and entries_of(event) > OFF_LOOP_ENTRIES:
            return self.loop.run_in_executor(None, _encode_big, event)
        return json_message(event.type, event.data)

    def send_raw(self, message: "Outgoing", client_id: str | None = None, key: tuple | None = None) -> None:
        """Queue an encoded message; a future (bytes or None) is sent when done, in its place.
        `key`: `message_key` of the message, when a newer one may supersede it (`Outbox`)."""
        if client_id is None:
            for conn in list(self.clients.values()):
                self._enqueue(conn, message, key)
            return
        conn = self.clients.get(client_id)
        if conn is not None:
            self._enqueue(conn, message, key)
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

    def _enqueue(self, conn: ClientConnection, message: Outgoing, key: tuple | None = None) -> None:
        outbox = conn.outbox
        if not outbox.put(message, key) and (outbox.dropped == 1 or outbox.dropped % 1000 == 0):
            log.warning("client %s is not reading (nothing sent for %.0f s, %d messages waiting); "
                        "%d messages dropped", conn.client_id, outbox.stalled_for(),
                        len(outbox), outbox.dropped)

    async def _drain(self, conn: ClientConnection) -> None:
        outbox = conn.outbox
        while True:
            message = await outbox.get()
            try:
                await self._send_one(conn, message)
            except (ConnectionError, RuntimeError) as exc:
                log.debug("send to %s failed: %s", conn.client_id, exc)
                self._orphan(conn, message)
                return
            finally:
                outbox.sent()

    async def _send_one(self, conn: ClientConnection, message: Outgoing) -> None:
        if isinstance(message, Deferred):  # encoded now that the writer has reached it
            if message.superseded:
                return
            message = self._encode(message.event)
        if isinstance(message, asyncio.Future):
            message = await message
            if message is None:
                return
        if conn.ws.closed:
            raise ConnectionResetError("socket closed")
        if isinstance(message, bytes):
            await conn.ws.send_bytes(message)
        else:
            await conn.ws.send_str(message)

    def _orphan(self, conn: ClientConnection, unsent: Outgoing) -> None:
        """A socket died: unregister it now, and keep what it did not get if it owns the running
        prompt, so that a reconnect with the same id still receives it."""
        if self.clients.get(conn.client_id) is conn:
            del self.clients[conn.client_id]
        missed = self._missed.get(conn.client_id)
        if missed is not None:
            missed.append(unsent)
            missed.extend(conn.outbox.take_all())

    # -- connections -------------------------------------------------------------------------
    def connect(self, client_id: str, ws: web.WebSocketResponse) -> ClientConnection:
        """Register a socket (replacing any older one with the same id) and greet it."""
        conn = ClientConnection(client_id, ws, outbox=Outbox(self.outbox_limit, coalesce_backlog=self.coalesce_backlog,
                                                             stall_seconds=self.stall_seconds, clock=self.clock))
        conn.writer = asyncio.get_running_loop().create_task(self._drain(conn))
        self.clients[client_id] = conn
        self._enqueue(conn, json_message("status", {"status": self.status_data(), "sid": client_id}))
        missed: list[Outgoing] = []
        if client_id in self._missed:
            missed = list(self._missed[client_id])
            self._missed[client_id].clear()
            for message in missed:  # a kept map may still be superseded by a newer one queued after it
                key = None
                if isinstance(message, Deferred) and isinstance(message.event, ProgressStateEvent):
                    key = ("progress_state", message.event.prompt_id)
                self._enqueue(conn, message, key)
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
            missed.extend(conn.outbox.take_all())  # queued but never sent: keep for a reconnect

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
