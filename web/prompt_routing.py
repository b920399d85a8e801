"""Delivering one prompt's executor events to the client that submitted it (ComfyUI's routing).

Shared by the embedded queue worker (web/worker.py) and the Ray dispatcher
(web/ray_backend/dispatcher.py), so that both send the same frames in the same order: JSON
events go to the owner only, previews become binary frames (type 1, or 4 for clients that
asked for metadata) encoded off the loop but kept in their place, and without an owner only
`execution_interrupted` is sent (to everyone).

A pack that replaced ComfyUI's `PromptServer.send_sync` (a wrapper that times nodes or forwards
notifications, then calls the original) sees every JSON event it would see on ComfyUI: the
events to a client go through `event_relay()`'s answer (web/state.py), whose call of the
original sends them; a replacement that raises is logged and the event sent as usual. The
queue worker hands them over on the prompt's thread as they are emitted (PromptRun.observe), so
they arrive in step with the nodes, and they reach `_route` marked `delivered`; the Ray
dispatcher's, and the final `executing` None, go through it here. The coalesced
`progress_state` maps are not relayed: they are built lazily, only for a connected client
(web/hub.py).

A class using `PromptRouting` sets `self.hub` (web.hub.WebSocketHub) and `self.preview_size`,
and may set `self.event_relay` (`() -> send | None`).
"""
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Callable

from graph.events import EXECUTING, EXECUTION_INTERRUPTED, PREVIEW, Event
from web.protocol import encode_image, preview_frame, preview_frame_with_metadata

if TYPE_CHECKING:  # annotations only
    from web.hub import WebSocketHub
    from web.queue_item import QueueItem

log = logging.getLogger(__name__)


class PromptRouting:
    hub: "WebSocketHub"
    preview_size: int
    event_relay: "Callable[[], Callable[[str, Any, str | None], Any] | None] | None" = None

    def _route(self, event: Event, item: "QueueItem", client_id: str | None) -> None:
        """Deliver one executor event; may run on a node thread."""
        if event.type == PREVIEW:
            if client_id is not None:
                self._send_preview(event.data, client_id)
            return
        if event.type == EXECUTING:
            self._on_loop(self._note_executing, item, (event.data or {}).get("node"))
        if client_id is None:
            # ComfyUI: without a client, only `execution_interrupted` is sent (to everyone).
            if event.type == EXECUTION_INTERRUPTED:
                self.send_event(event.type, event.data, None)
            return
        if event.delivered:  # a pack's send_sync already sent it, on the prompt's thread
            return
        self.send_event(event.type, event.data, client_id)

    def send_event(self, event_type: str, data: Any, client_id: str | None) -> None:
        """One JSON event of a prompt to `client_id` (None: every client), through a pack's
        `send_sync` when one replaced it (see the module docstring). Thread-safe."""
        if not self.relay_event(event_type, data, client_id):
            self.hub.send_threadsafe(event_type, data, client_id)

    def relay_event(self, event_type: str, data: Any, client_id: str | None) -> bool:
        """Hand the event to a pack's `send_sync` replacement (whose call of the original sends
        it); False when there is none, or it raised (logged): the caller sends it as usual."""
        relay = self.event_relay() if self.event_relay is not None else None
        if relay is None:
            return False
        try:
            relay(event_type, data, client_id)
        except Exception:  # noqa: BLE001 -- a pack's wrapper must not cost the client its events
            log.exception("a pack's PromptServer.send_sync failed on %r; sent as usual", event_type)
            return False
        return True

    def _note_executing(self, item: "QueueItem", node: str | None) -> None:
        self.hub.note_executing(item.prompt_id, node)  # for reconnect catch-up

    def _send_preview(self, data: dict, client_id: str | None) -> None:
        self._on_loop(self._queue_preview, data, client_id)

    def send_preview(self, data: dict, client_id: str | None) -> None:
        """A preview image (`data` as the executor's `preview` event: image, format, max_size,
        node ids) to `client_id` (None: every client), encoded off the loop. Thread-safe."""
        self._send_preview(data, client_id)

    def _queue_preview(self, data: dict, client_id: str | None) -> None:
        """Encode off the event loop (a full-size PNG takes a while) but keep the frame's place
        in the client's message order: the outbox holds the future until it is done."""
        hub = self.hub
        conn = hub.client(client_id)
        with_meta = conn is not None and conn.supports_preview_metadata
        future = asyncio.get_running_loop().run_in_executor(None, self._encode_frame, data, with_meta)
        hub.send_raw(future, client_id)

    def _encode_frame(self, data: dict, with_meta: bool) -> bytes | None:
        fmt = str(data.get("format", "JPEG")).upper()
        max_size = data.get("max_size", self.preview_size)
        try:
            encoded = encode_image(data.get("image"), fmt, max_size)
        except Exception:  # noqa: BLE001 -- a broken preview must not fail the prompt
            log.exception("prompt %s: preview could not be encoded", data.get("prompt_id"))
            return None
        return preview_frame_with_metadata(encoded, fmt, data) if with_meta else preview_frame(encoded, fmt)

    def _on_loop(self, fn: Any, *args: Any) -> None:
        # Node threads must not touch the hub directly; FIFO scheduling keeps message order.
        self.hub.call_on_loop(fn, *args)
