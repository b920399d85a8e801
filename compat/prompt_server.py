"""`server.PromptServer.instance` for packs: the aiohttp app and routes, the queue, custom
WebSocket events, the running client.

ComfyUI's `PromptServer` is the aiohttp server itself; packs use a few of its members (ComfyUI
0.3.64's server.py names):
- `instance.app`: the real `aiohttp.web.Application` the server will serve. It is made when
  a pack first reads it (ComfyUI's: `client_max_size` from `--max-upload-size`), so routes,
  static folders, middlewares and startup hooks packs add at import time are there when the
  host builds its app on it (web/app.py `create_app` puts the server's own middlewares first,
  as ComfyUI's are first in its list);
- `instance.routes`: a `RouteTableDef` packs decorate at import time, served bare and under
  `/api` when the app is created; a handler that raises answers that one request with a 500
  JSON body naming the pack and the route, and is logged (`PackRouteTable`); ComfyUI leaves it
  to aiohttp's plain-text 500, either way the server goes on serving;
- `instance.prompt_queue`: ComfyUI's `PromptQueue` methods over the server's queue and history
  (compat/pack_queue.py); `instance.number`: the next prompt number;
- `send_sync(event, data, sid=None)` (a JSON message to one client, or to every client when
  `sid` is None; callable from node threads), `send` / `send_json` / `send_bytes` (async),
  `send_progress_text(text, node_id, sid=None)`;
- `client_id`, `last_prompt_id` (the running prompt's), `last_node_id` (the node running in the
  calling thread), `loop`, `supports`, `sockets_metadata` (each client's feature flags),
  `add_on_prompt_handler(fn)`, `trigger_on_prompt(body)`;
- `address` and `port`: the first `--listen` host and `--port`, once the server listens (before,
  an AttributeError, as ComfyUI's server sets them in `start_multi_address`).
- `user_manager` (ComfyUI's `UserManager`: `get_request_user_id`, `get_request_user_filepath`,
  `settings.get_settings` / `save_settings`, over the server's user folders) and `web_root` (the
  served editor's folder).
`PromptServer.instance` is the facade of the active `CompatSession` (compat/session.py). Other
members of ComfyUI's server (`sockets`, ...) raise an AttributeError that names them.
"""
from __future__ import annotations

import functools
import inspect
import logging
import struct
import traceback
from pathlib import Path
from typing import Any, Awaitable, Callable

from aiohttp import web

from compat.pack_queue import PackPromptQueue, ServerNotStartedError
from compat.session import CompatSession, active

log = logging.getLogger(__name__)


class BinaryEventTypes:
    """ComfyUI's binary WebSocket frame types (server.py / protocol.py)."""

    PREVIEW_IMAGE = 1
    UNENCODED_PREVIEW_IMAGE = 2
    TEXT = 3
    PREVIEW_IMAGE_WITH_METADATA = 4


def _preview_data(event: int, data: Any) -> dict:
    """The server's preview event data from ComfyUI's unencoded preview payloads."""
    from graph.context import current

    meta: dict = {}
    if event == BinaryEventTypes.PREVIEW_IMAGE_WITH_METADATA:
        data, meta = data
        meta = dict(meta or {})
    fmt, image, max_size = data
    ctx = current()
    if ctx is not None:  # the calling node's ids, unless the pack named its own
        meta.setdefault("node_id", ctx.node_id)
        meta.setdefault("display_node_id", ctx.display_node_id)
        meta.setdefault("prompt_id", ctx.prompt_id)
    return {**meta, "image": image, "format": str(fmt).upper(), "max_size": max_size}


class PackRouteTable(web.RouteTableDef):
    """`PromptServer.instance.routes`: a `RouteTableDef` where every coroutine handler a pack adds
    is wrapped by `guard_handler` with the name of the pack being imported."""

    @classmethod
    def adopt(cls, table: web.RouteTableDef) -> "PackRouteTable":
        """`table` itself when it is one, else a new one holding its routes as they are."""
        if isinstance(table, cls):
            return table
        adopted = cls()
        adopted._items.extend(table)  # noqa: SLF001 -- RouteTableDef has no public add
        return adopted

    def route(self, method: str, path: str, **kwargs: Any) -> Callable[[Any], Any]:
        from graph.packs import loading_pack

        add = super().route(method, path, **kwargs)
        pack = loading_pack()

        def register(handler: Any) -> Any:
            add(guard_handler(handler, pack, method, path) if inspect.iscoroutinefunction(handler) else handler)
            return handler  # the pack keeps its own function, as with aiohttp's table
        return register


def guard_handler(handler: Callable[[web.Request], Awaitable[Any]], pack: str | None, method: str,
                  path: str) -> Callable[[web.Request], Awaitable[Any]]:
    """`handler`, except that an exception it raises (other than aiohttp's HTTP responses)
    answers 500 with `{"error": {"type": "custom_node_route_error", "message", "details",
    "extra_info": {"pack", "method", "path"}}}` (ComfyUI's error shape) and is logged with the
    pack's name and the traceback; every other route, and the server, go on as before."""
    owner = pack or getattr(handler, "__module__", None) or "?"

    @functools.wraps(handler)
    async def guarded(request: web.Request) -> Any:
        try:
            return await handler(request)
        except web.HTTPException:
            raise
        except Exception as exc:  # noqa: BLE001 -- the pack's bug stays with this request
            log.error("custom node pack %s: route %s %s raised %s: %s (answered 500)\n%s", owner, method, path,
                      type(exc).__name__, exc, traceback.format_exc())
            return web.json_response({"error": {
                "type": "custom_node_route_error",
                "message": f"custom node pack {owner}: the handler of {method} {path} raised {type(exc).__name__}",
                "details": str(exc),
                "extra_info": {"pack": owner, "method": method, "path": path},
            }}, status=500)
    return guarded


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
        # the session's table (what `bind` serves) becomes a guarding one before any pack adds to it
        session.routes = PackRouteTable.adopt(session.routes)
        self.routes = session.routes
        self.supports = ["custom_nodes_from_web"]
        self.prompt_queue = PackPromptQueue(session)

    def __getattr__(self, name: str) -> Any:  # only for names this facade does not define
        if name == "web_root":  # its property found no served editor
            raise AttributeError("PromptServer.instance.web_root: no editor is served (yet) in this process")
        if name in ("address", "port"):  # their properties found no listening server
            raise AttributeError(f"PromptServer.instance.{name}: set once the server listens (ComfyUI's "
                                 "start_multi_address); no server is listening in this process yet")
        raise AttributeError(f"PromptServer.instance.{name}: ComfyUI's server has it, this engine's server "
                             "facade does not provide it (compat/prompt_server.py lists what it does)")

    @property
    def user_manager(self) -> "UserManager":
        """ComfyUI's `UserManager`: each request's user folder and settings file."""
        if "_user_manager" not in vars(self):
            self._user_manager = UserManager(self._session)
        return self._user_manager

    @property
    def web_root(self) -> str:
        """The served editor's static folder (ComfyUI's frontend dist path); an AttributeError
        until the server serves one."""
        root = getattr(self._session.state, "frontend_root", None)
        if root is None:
            raise AttributeError("no editor served")  # __getattr__ answers with the message
        return str(root)

    @property
    def app(self) -> Any:
        """The `aiohttp.web.Application` this session's server will serve (made on first read)."""
        return self._session.pack_app()

    @property
    def on_prompt_handlers(self) -> list[Callable[[dict], dict]]:
        return self._session.on_prompt_handlers

    @property
    def number(self) -> int:
        """The number the next prompt without one gets (ComfyUI's counter)."""
        return self._state("number").queue.counter

    @number.setter
    def number(self, value: int) -> None:
        self._state("number").queue.counter = value

    @property
    def sockets_metadata(self) -> dict[str, dict]:
        """`{client_id: {"feature_flags": {...}}}` of the connected clients (what each sent in
        its `feature_flags` message; comfy_api.feature_flags reads it). Empty without a server."""
        state = self._session.state
        clients = dict(getattr(getattr(state, "hub", None), "clients", {}) or {})
        return {sid: {"feature_flags": dict(getattr(conn, "feature_flags", {}) or {})} for sid, conn in clients.items()}

    @property
    def last_node_id(self) -> str | None:
        """The display id of the node that last started running (ComfyUI's server attribute,
        which its `execution.execute` sets before each node it does not take from the cache): a
        pack's `execution.execute` wrapper reads the previous node's before the call and this
        node's after it. None before the first node."""
        return self._session.last_node_id

    def _listening(self) -> Any:
        """The server's config once it listens (its app started: the hub has the loop), else
        raise AttributeError, as ComfyUI's server has no `address` / `port` before then."""
        state = self._session.state
        if state is None or getattr(getattr(state, "hub", None), "loop", None) is None:
            raise AttributeError("not listening")  # __getattr__ answers with the message
        return state.config

    @property
    def address(self) -> str:
        """The first address the server listens on, as given (`--listen`'s first host:
        "127.0.0.1", "0.0.0.0", "::"), as ComfyUI's `start_multi_address` sets it."""
        listen = self._listening().listen
        return listen[0] if listen else "127.0.0.1"

    @property
    def port(self) -> int:
        """The port the server listens on (`--port`), as ComfyUI sets it (given 0, the
        configured 0 too, as ComfyUI: the server state does not keep the port it bound)."""
        return int(self._listening().port)

    def _state(self, what: str) -> Any:
        state = self._session.state
        if state is None:
            raise ServerNotStartedError(f"PromptServer.instance.{what}: no server is running in this process yet")
        return state

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
        event with bytes data is a binary frame; `UNENCODED_PREVIEW_IMAGE` with `(format, PIL
        image, max_size)` (or `PREVIEW_IMAGE_WITH_METADATA` with `((format, image, max_size),
        metadata)`) is encoded as the server's own previews are, scaled to fit max_size (None:
        as it is). Thread-safe; dropped (logged) without a server."""
        state = self._session.state
        if state is None:
            log.warning("PromptServer.send_sync(%r) before the server started; dropped", event)
            return
        if event in (BinaryEventTypes.UNENCODED_PREVIEW_IMAGE, BinaryEventTypes.PREVIEW_IMAGE_WITH_METADATA):
            state.send_preview(_preview_data(event, data), sid)
            return
        state.send(event, data, sid)

    async def send(self, event: str | int, data: Any, sid: str | None = None) -> None:
        self.send_sync(event, data, sid)

    async def send_json(self, event: str, data: Any, sid: str | None = None) -> None:
        """`{"type": event, "data": data}` to `sid` (None: every client)."""
        if not isinstance(event, str):
            raise TypeError(f"send_json: the event type must be a string, got {event!r}")
        self.send_sync(event, data, sid)

    async def send_bytes(self, event: int, data: bytes, sid: str | None = None) -> None:
        """A binary frame `[u32 event][data]` to `sid` (None: every client)."""
        self.send_sync(event, self.encode_bytes(event, data)[4:], sid)

    def encode_bytes(self, event: int, data: bytes) -> bytes:
        """ComfyUI's binary frame: big-endian u32 event type, then the payload."""
        if not isinstance(event, int):
            raise RuntimeError(f"Binary event types must be integers, got {event}")
        return struct.pack(">I", event) + bytes(data)

    def send_progress_text(self, text: str | bytes, node_id: str, sid: str | None = None) -> None:
        """ComfyUI's TEXT frame: `[u32 len(node_id)][node_id][text]` (binary type 3)."""
        body = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        node = str(node_id).encode("utf-8")
        self.send_sync(BinaryEventTypes.TEXT, struct.pack(">I", len(node)) + node + body,
                       sid if sid is not None else self.client_id)

    def add_on_prompt_handler(self, handler: Callable[[dict], dict]) -> None:
        """`handler(body) -> body` rewrites every POST /prompt body before validation."""
        self._session.on_prompt_handlers.append(handler)

    def trigger_on_prompt(self, json_data: dict) -> dict:
        """Every on_prompt handler in order over `json_data`; one that raises is logged and
        skipped (ComfyUI's server.py), as the server's own POST /prompt does."""
        for handler in list(self._session.on_prompt_handlers):
            try:
                json_data = handler(json_data)
            except Exception:  # noqa: BLE001 -- ComfyUI logs and carries on
                log.warning("an on_prompt handler failed:\n%s", traceback.format_exc())
        return json_data


class UserManager:
    """ComfyUI's `app.user_manager.UserManager` as packs use it, over the server's user folders
    (web/userdata.py): the request's user is the logged-in one with `--users`, the `Comfy-User`
    header's with `--multi-user`, else "default", as for the editor's own /userdata routes."""

    def __init__(self, session: CompatSession) -> None:
        self._session = session
        self.settings = AppSettings(self)

    def user_data(self) -> Any:
        routes = getattr(self._session.state, "user_data", None)
        if routes is None:
            raise ServerNotStartedError("PromptServer.instance.user_manager: no server is running in this process yet")
        return routes

    def _root(self, request: web.Request) -> Path:
        root = self.user_data().user_root(request)
        if root is None:  # ComfyUI's answer for a Comfy-User header naming no user
            raise KeyError(f"Unknown user: {request.headers.get('Comfy-User', '')[:80]}")
        return Path(root)

    def get_request_user_id(self, request: web.Request) -> str:
        return self._root(request).name

    def get_request_user_filepath(self, request: web.Request, file: str | None, type: str = "userdata",
                                  create_dir: bool = True) -> str | None:
        """The path of `file` in the request's user folder (the folder itself for None); None
        when `file` leaves it, as ComfyUI answers (its callers then refuse with 403)."""
        if type != "userdata":
            raise KeyError(f"Unknown filepath type: {type}")
        root = self._root(request).resolve()
        if file is None:
            path = root
        else:
            path = (root / file).resolve()
            if path != root and root not in path.parents:
                return None
        if create_dir:
            (path if file is None else path.parent).mkdir(parents=True, exist_ok=True)
        return str(path)


class AppSettings:
    """ComfyUI's `app.app_settings.AppSettings`: the request's user's `comfy.settings.json`."""

    def __init__(self, user_manager: UserManager) -> None:
        self.user_manager = user_manager

    def get_settings(self, request: web.Request) -> dict:
        """What the user's settings file holds ({} without one)."""
        return self.user_manager.user_data().settings_for(request).stored()

    def save_settings(self, request: web.Request, settings: dict) -> None:
        """Store exactly `settings` as the user's settings file."""
        self.user_manager.user_data().settings_for(request).replace(settings)


# The facade's own `send_sync`, to tell a pack's replacement from it.
OWN_SEND_SYNC = PromptServer.send_sync


def replaced_send_sync(session: CompatSession) -> Callable[[str, Any, str | None], Any] | None:
    """`send_sync` as a pack replaced it, bound to the session's server facade, or None when no
    pack did. Packs replace it on the class (`server.PromptServer.send_sync = wrapper`, keeping the
    original to call: progress, timing and notification packs) or on the instance; ComfyUI's
    executor sends every execution event through it, so the server sends the engine's through
    the replacement too (web/prompt_routing.py), and the wrapper's call of the original sends."""
    server = session.prompt_server
    if server is not None and "send_sync" in vars(server):
        return vars(server)["send_sync"]
    on_class = PromptServer.__dict__.get("send_sync")
    if on_class is None or on_class is OWN_SEND_SYNC:
        return None
    if server is None:  # as `PromptServer.instance` makes it, for this session
        server = session.prompt_server = PromptServer(session)
    return functools.partial(on_class, server)
