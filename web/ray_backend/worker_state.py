"""The server state as packs see it on a worker (`PromptServer.instance`, compat/prompt_server.py):
what a node sends with `send_sync` / `send_json` / `send_progress_text` / unencoded previews
travels in the running prompt's stream to the server, which sends it to the clients in its
place among the prompt's own events; `client_id` and `last_prompt_id` name the running prompt.

`comfy.model_management.interrupt_current_processing()` stops the prompt running here. The
server's queue and sockets live on the server, so `prompt_queue` and `sockets_metadata` have
nothing to show here (the facade says so, or answers empty). A message sent while no
prompt runs on this worker (a pack's own thread, between prompts) has no stream to go into and
is dropped, with a warning.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable

log = logging.getLogger(__name__)

SEND, PREVIEW = "send", "preview"


@dataclass(frozen=True)
class PackMessage:
    """One `send_sync` (kind SEND: event type and data) or unencoded preview (kind PREVIEW: the
    preview event's data, a PIL image in it) for client `client_id` (None: every client)."""

    kind: str
    event: str | int | None
    data: Any
    client_id: str | None


class WorkerQueue:
    """`state.queue` on a worker: only `interrupt`, of the prompt running here."""

    def __init__(self, interrupt: Callable[[str | None], bool]) -> None:
        self.interrupt = interrupt


class WorkerServerState:
    """`CompatSession.state` on a worker: the members `PromptServer.instance` and
    `comfy.model_management` read (`config` for the preview size)."""

    hub = None  # no sockets here (sockets_metadata answers empty, loop None)

    def __init__(self, config: Any, interrupt: Callable[[str | None], bool]) -> None:
        self.config = config
        self.queue = WorkerQueue(interrupt)
        self.running_prompt_id: str | None = None
        self.running_client_id: str | None = None
        self._put: Callable[[PackMessage], None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None

    def open(self, prompt_id: str, client_id: str | None, put: Callable[[Any], None]) -> None:
        """A prompt starts: its messages go to `put` (the prompt's event queue), on this loop."""
        self.running_prompt_id, self.running_client_id, self._put = prompt_id, client_id, put
        self._loop, self._loop_thread = asyncio.get_running_loop(), threading.get_ident()

    def close(self) -> None:
        self.running_prompt_id = self.running_client_id = self._put = None

    def send(self, event_type: str | int, data: Any, client_id: str | None = None) -> None:
        self._post(PackMessage(SEND, event_type, data, client_id))

    def send_preview(self, data: dict, client_id: str | None = None) -> None:
        self._post(PackMessage(PREVIEW, None, data, client_id))

    def _post(self, message: PackMessage) -> None:
        put, loop = self._put, self._loop
        if put is None or loop is None:
            log.warning("a pack sent %r while no prompt ran on this Ray worker; dropped", message.event or message.kind)
            return
        if threading.get_ident() == self._loop_thread:
            put(message)
        else:  # a node thread: the queue belongs to the loop
            loop.call_soon_threadsafe(put, message)
