"""`GET /ws?clientId=`: ComfyUI's WebSocket, plus prompt submission over the socket.

Client -> server text frames understood (anything else is ignored, as in ComfyUI):
  {"type": "feature_flags", "data": {...}}     -> {"type": "feature_flags", "data": server flags}
  {"type": "queue_prompt", "data": {"prompt", "extra_data"?, "prompt_id"?,
                                    "partial_execution_targets"?, "number"?, "front"?}}
      -> {"type": "prompt_queued", "data": {prompt_id, number, node_errors}}
       | {"type": "prompt_rejected", "data": {error, node_errors}}
     The prompt belongs to this socket's client id (its messages come here). A `request_id` in
     `data` is echoed back in the reply, so a client can match replies to requests.
  {"type": "interrupt", "data": {"prompt_id"?}}  stops the running prompt if this client owns it
"""
from __future__ import annotations

import json
import logging
import uuid
from typing import TYPE_CHECKING

from aiohttp import WSMsgType, web

from web.auth.access import current_user
from web.hub import ClientConnection
from web.queue_item import DEFAULT_OWNER
from web.routes_info import features
from web.state import AppState, state_of
from web.submission import request_error, submit_prompt

if TYPE_CHECKING:
    from web.auth.store import User

log = logging.getLogger(__name__)

MAX_CLIENT_ID_LENGTH = 256


async def _handle_text(state: AppState, conn: ClientConnection, text: str, user: "User | None" = None) -> None:
    try:
        message = json.loads(text)
    except (ValueError, RecursionError):
        return
    if not isinstance(message, dict):
        return
    kind, data = message.get("type"), message.get("data")
    if kind == "feature_flags":
        if isinstance(data, dict):
            conn.feature_flags = data
        state.hub.send("feature_flags", features(state), conn.client_id)
    elif kind == "queue_prompt":
        request_id = data.get("request_id") if isinstance(data, dict) else None
        if user is not None and user.read_only:  # --users: a viewer only reads
            status, payload = 403, request_error("forbidden", "a viewer may not queue prompts")
        elif isinstance(data, dict):
            body = {k: v for k, v in data.items() if k not in ("client_id", "request_id")}
            status, payload = await submit_prompt(state, body, client_id=conn.client_id,
                                                  owner=user.name if user is not None else DEFAULT_OWNER)
        else:
            status, payload = 400, request_error("invalid_prompt", "Invalid queue_prompt message",
                                                 "'data' must be an object with a 'prompt'")
        if request_id is not None and isinstance(request_id, (str, int, float)):
            payload = {**payload, "request_id": request_id}
        state.hub.send("prompt_queued" if status == 200 else "prompt_rejected", payload, conn.client_id)
    elif kind == "interrupt":
        prompt_id = data.get("prompt_id") if isinstance(data, dict) else None
        # Only the client's own running prompts (several run at once with --ray).
        for item in state.queue.running_items():
            if item.client_id == conn.client_id and (not isinstance(prompt_id, str) or prompt_id == item.prompt_id):
                state.queue.interrupt(item.prompt_id)


async def websocket_handler(request: web.Request) -> web.WebSocketResponse:
    state = state_of(request)
    client_id = request.query.get("clientId") or uuid.uuid4().hex
    if len(client_id) > MAX_CLIENT_ID_LENGTH:
        raise web.HTTPBadRequest(text=f"clientId longer than {MAX_CLIENT_ID_LENGTH} characters")
    user = current_user(request)
    if user is not None and not state.auth.claim_client(client_id, user.name):
        # --users: another user's client id would receive that user's events; this socket gets a new one
        client_id = uuid.uuid4().hex
        state.auth.claim_client(client_id, user.name)
    # Messages, not uploads: --max-ws-message-size; --ws-heartbeat pings, and closes a socket whose
    # client stopped answering (aiohttp waits half the interval for the pong). Issue 34.
    config = state.config
    ws = web.WebSocketResponse(heartbeat=config.ws_heartbeat or None, max_msg_size=config.max_ws_message_bytes)
    await ws.prepare(request)
    conn = state.hub.connect(client_id, ws)
    try:
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                try:
                    await _handle_text(state, conn, msg.data, user)
                except Exception:  # noqa: BLE001 -- one bad frame must not drop the socket
                    log.exception("websocket %s: message handling failed", client_id)
            elif msg.type == WSMsgType.ERROR:
                log.debug("websocket %s closed with %s", client_id, ws.exception())
    finally:
        await state.hub.disconnect(conn)
    return ws


def ws_routes() -> web.RouteTableDef:
    routes = web.RouteTableDef()
    routes.get("/ws")(websocket_handler)
    return routes
