"""`server.PromptServer.instance` for packs: routes, custom WebSocket events, the running client.

ComfyUI's `PromptServer` is the aiohttp server itself; packs use a few of its members:
`instance.routes` (a `RouteTableDef` they decorate at import time; served bare and under
`/api` when the app is created), `instance.send_sync(event, data, sid=None)` (a JSON message to
one client, or to every client when `sid` is None; callable from node threads),
`instance.send_progress_text(text, node_id, sid=None)`, `instance.client_id` (the running
prompt's client), `instance.add_on_prompt_handler(fn)`. `PromptServer.instance` is the facade of
the active `CompatSession` (compat/session.py).
"""
from __future__ import annotations

import logging
import struct
from typing import Any, Callable

from compat.session import CompatSession, active

log = logging.getLogger(__name__)


class BinaryEventTypes:
    """ComfyUI's binary WebSocket frame types (server.py / protocol.py)."""

    PREVIEW_IMAGE = 1
    UNENCODED_PREVIEW_IMAGE = 2
    TEXT = 3
    PREVIEW_IMAGE_WITH_METADATA = 4


class _Instance:
    """`PromptServer.instance`: the facade of the active session (made once per session)."""

    def __get__(self, obj: Any, owner: type) -> "PromptServer":
        session = active()
        if session.prompt_server is None:
            session.prompt_server = owner(session)
        return session.prompt_server


class PromptServer:
    instance = _Instance()

    def __init__(self, session: CompatSession) -> None:
        self._session = session
        self.routes = session.routes
        self.supports = ["custom_nodes_from_web"]

    @property
    def client_id(self) -> str | None:
        """The client that submitted the running prompt (None when idle or without a server)."""
        state = self._session.state
        return state.running_client_id if state is not None else None

    @property
    def last_prompt_id(self) -> str | None:
        state = self._session.state
        return state.running_prompt_id if state is not None else None

    @property
    def loop(self) -> Any:
        state = self._session.state
        return getattr(getattr(state, "hub", None), "loop", None)

    def send_sync(self, event: str | int, data: Any, sid: str | None = None) -> None:
        """Send `{"type": event, "data": data}` to client `sid` (None: every client); an int
        event with bytes data is a binary frame. Thread-safe; dropped (logged) without a server."""
        state = self._session.state
        if state is None:
            log.warning("PromptServer.send_sync(%r) before the server started; dropped", event)
            return
        if event == BinaryEventTypes.UNENCODED_PREVIEW_IMAGE:
            raise ValueError("send_sync: unencoded preview images are sent through comfy.utils.ProgressBar "
                             "update_absolute(value, total, preview), not send_sync")
        state.send(event, data, sid)

    async def send(self, event: str | int, data: Any, sid: str | None = None) -> None:
        self.send_sync(event, data, sid)

    def send_progress_text(self, text: str | bytes, node_id: str, sid: str | None = None) -> None:
        """ComfyUI's TEXT frame: `[u32 len(node_id)][node_id][text]` (binary type 3)."""
        body = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        node = str(node_id).encode("utf-8")
        self.send_sync(BinaryEventTypes.TEXT, struct.pack(">I", len(node)) + node + body,
                       sid if sid is not None else self.client_id)

    def add_on_prompt_handler(self, handler: Callable[[dict], dict]) -> None:
        """`handler(body) -> body` rewrites every POST /prompt body before validation."""
        self._session.on_prompt_handlers.append(handler)
