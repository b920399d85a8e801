"""The typed state of one server: what every route handler, the WebSocket hub and the queue
worker share. There is no server singleton; each `aiohttp.web.Application` holds one `AppState`
under `STATE_KEY`.

For route authors (the frontend/userdata routes, node packs through the compat layer):

    from web.state import STATE_KEY
    async def handler(request):
        state = request.app[STATE_KEY]
        state.env.user_dir          # pathlib.Path, created at start-up
        state.config.max_upload_bytes

Fields (stable; add, don't rename):
  config       web.config.ServerConfig — flags (listen, port, cors_origin, max_upload_size_mb, ...)
  env          nodes.environment.Environment — folders: output_dir, input_dir, temp_dir,
               user_dir, model folders (`env.folders`), preview_method, memory
  registry     graph.registry.Registry — every node type (`registry.object_info(env)`)
  executor     graph.executor.Executor — the one executor (its caches live across prompts)
  store        web.store.PromptStore — SQLite (WAL) queue + history in `env.user_dir`
  queue        web.prompt_queue.PromptQueue — pending/running prompts (mirrors the store)
  hub          web.hub.WebSocketHub — connected sockets by client id
  worker       web.worker.QueueWorker — runs the queue (made and started by the app's on_startup);
               with --ray a web.ray_backend.dispatcher.RayDispatcher (same interface, several
               prompts at once, `workers_info()` for /system_stats)
  packs        list of graph.packs.PackResult — loaded custom-node packs (`.web_directory`)
  extra_routes list of aiohttp RouteTableDef — routes added before start (packs); each one is
               registered bare and under /api by the app factory (web.app.create_app)
  pack_app     aiohttp Application or None — the app node packs added routes, static folders,
               middlewares or hooks to at import time (ComfyUI's `PromptServer.instance.app`);
               the app factory builds on it, the server's own middlewares first
  node_replacements  web.node_replacements.NodeReplacements — old node type -> stand-ins
               (`GET /node_replacements`; applied to every POST /prompt before validation);
               packs' node_replacements.json files are loaded by web/routes_subgraphs.py
  pack_load    web.pack_start.DeferredPackLoad or None — the packs' import when it runs after the
               server listens (a start with a valid pack record); `await
               web.pack_start.packs_ready(state)` before anything that needs a pack's nodes
  auth         web.auth.service.AuthService or None — the users mode (--users; web/auth/), built
               by the app factory: who each request is (web.auth.access), quotas, file owners
  on_prompt_handlers  list of callables `(body: dict) -> dict` that may rewrite every POST
               /prompt body before validation (ComfyUI's add_on_prompt_handler); an exception in
               one is logged and that handler skipped
  prompt_validation  `() -> validate | None`: a pack's replacement of ComfyUI's
               `execution.validate_prompt`, which POST /prompt then validates through
  event_relay  `() -> send | None`: a pack's replacement of ComfyUI's `PromptServer.send_sync`,
               which the queue worker then sends each prompt's JSON events through
               (`send(event_type, data, client_id)`; web/prompt_routing.py)

Thread-safe methods (callable from node worker threads):
  state.send_preview(data, client_id=None)  a preview image frame (packs' unencoded previews)
  state.send(event_type, data, client_id=None)  JSON event `{"type", "data"}` to one client
               (or to all with client_id=None); an `int` event_type with `bytes` data sends a
               binary frame `[u32 type][data]`
  state.running_client_id / state.running_prompt_id   the running prompt's owner and id, or None
               (with --ray: the oldest running prompt's; `queue.running_items()` lists them all)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from aiohttp import web

from web.config import ServerConfig
from web.node_replacements import NodeReplacements

if TYPE_CHECKING:  # imported for annotations only: keeps `web.state` light to import
    from graph.executor import Executor
    from graph.registry import Registry
    from nodes.environment import Environment
    from web.hub import WebSocketHub
    from web.prompt_queue import PromptQueue
    from web.store import PromptStore


@dataclass
class AppState:
    config: ServerConfig
    env: "Environment"
    registry: "Registry"
    executor: "Executor"
    store: "PromptStore"
    queue: "PromptQueue"
    hub: "WebSocketHub"
    # The web.worker.QueueWorker the app builds from the fields above (web/app.py). Typed `Any`:
    # the worker is made of this state's parts, so this module does not import it (no cycle).
    worker: Any = None
    packs: list[Any] = field(default_factory=list)
    extra_routes: list[web.RouteTableDef] = field(default_factory=list)
    on_prompt_handlers: list[Callable[[dict], dict]] = field(default_factory=list)
    # `() -> validate or None`: the compat session's answer to whether a pack replaced ComfyUI's
    # `execution.validate_prompt` (then POST /prompt validates through `await validate(prompt_id,
    # prompt, partial_targets)`, ComfyUI's `(ok, error, good_outputs, node_errors)`); None: no session
    prompt_validation: Callable[[], Any] | None = None
    # `() -> send or None`: the compat session's answer to whether a pack replaced ComfyUI's
    # `PromptServer.send_sync` (then execution events go through `send(event, data, client_id)`)
    event_relay: Callable[[], Any] | None = None
    # web.userdata.UserDataRoutes: each request's user folder and settings (ComfyUI's user manager)
    user_data: Any = None
    # the served editor's static folder, once served (ComfyUI's `PromptServer.web_root`)
    frontend_root: Path | None = None
    pack_app: web.Application | None = None
    node_replacements: NodeReplacements = field(default_factory=NodeReplacements)
    # web.pack_start.DeferredPackLoad while packs import after the server listens (else None)
    pack_load: Any = None
    # web.auth.service.AuthService with --users (built by web/app.py), else None: one user, as ComfyUI
    auth: Any = None
    # web.routes_logs.LogBuffer: the served app's recent log (/internal/logs; app.logger for packs)
    log_buffer: Any = None

    def send(self, event_type: str | int, data: Any, client_id: str | None = None) -> None:
        """Send an event to `client_id` (None: every socket). Safe from any thread."""
        self.hub.send_threadsafe(event_type, data, client_id)

    def send_preview(self, data: dict, client_id: str | None = None) -> None:
        """A preview image frame (type 1, or 4 for clients that asked for metadata) from `data`
        = `{"image": PIL image, "format": "JPEG"|"PNG", "max_size": int|None, "node_id", ...}`
        to `client_id` (None: every socket). Safe from any thread; needs the started worker."""
        if self.worker is None:
            raise RuntimeError("send_preview: the server's queue worker has not started")
        self.worker.send_preview(data, client_id)

    @property
    def running_client_id(self) -> str | None:
        item = self.queue.running
        return item.client_id if item is not None else None

    @property
    def running_prompt_id(self) -> str | None:
        item = self.queue.running
        return item.prompt_id if item is not None else None


STATE_KEY: web.AppKey[AppState] = web.AppKey("comfy_engine_state", AppState)


def state_of(request: web.Request) -> AppState:
    """The `AppState` of the application that received `request`."""
    return request.app[STATE_KEY]
