"""The aiohttp app factory and the serve loop. No server singleton: each call builds a new app
around the `AppState` it is given, so tests can run several servers in one process.

Route tables are registered twice, bare and under `/api` (ComfyUI's `add_routes`): scripts call
`/prompt`, the editor calls `/api/prompt`. Packs' routes (`state.extra_routes`, or the
`extra_routes` argument) get the same treatment, before the app starts.

With `warm_up=True` (main.py) the server listens first and then imports torch and the nodes'
runtime in a worker thread (web/warmup.py); the queue worker starts once that is done, so no
prompt races the import, while routes and sockets are served throughout.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import ssl
import threading
from typing import Awaitable, Callable, Iterable

from aiohttp import web

from web import frontend as editor
from web.asset_outputs import output_assets
from web.config import ServerConfig
from web.connections import LimitedAppRunner, body_timeout_middleware
from web.middlewares import middlewares_for
from web.pack_start import late_pack_routes, run_deferred_load
from web.routes_assets import add_asset_routes
from web.routes_files import file_routes
from web.routes_info import extension_urls, info_routes
from web.routes_jobs import jobs_routes
from web.routes_library import library_routes
from web.routes_logs import log_routes
from web.routes_prompt import prompt_routes
from web.routes_queue import queue_routes
from web.routes_subgraphs import subgraph_routes
from web.routes_v2 import add_v2_routes
from web.routes_workflow import workflow_routes
from web.state import STATE_KEY, AppState
from web.userdata import add_userdata_routes
from web.worker import QueueWorker
from web.ws import ws_routes

log = logging.getLogger(__name__)

API_PREFIX = "/api"
_WARM_UP: web.AppKey[bool] = web.AppKey("comfy_engine_warm_up", bool)
# The warm-up task, once started (a list set up front: an app's keys are frozen once it runs).
_WARM_UP_TASK: web.AppKey[list] = web.AppKey("comfy_engine_warm_up_task", list)
# What the queue worker still waits for ("runtime", "packs"); it starts once this is empty.
_WORKER_GATES: web.AppKey[set] = web.AppKey("comfy_engine_worker_gates", set)


def add_api_routes(app: web.Application, routes: Iterable[web.AbstractRouteDef]) -> None:
    """Register each route at its path and at `/api` + path (static definitions once)."""
    for route in routes:
        if isinstance(route, web.RouteDef):
            kwargs = dict(route.kwargs)
            allow_head = kwargs.pop("allow_head", False)
            for prefix in ("", API_PREFIX):
                path = prefix + route.path
                if route.method == "GET" and allow_head:
                    app.router.add_get(path, route.handler, **kwargs)
                else:
                    app.router.add_route(route.method, path, route.handler, **kwargs)
        else:
            route.register(app.router)


def create_app(state: AppState, *, extra_routes: Iterable[web.RouteTableDef] = (), frontend: bool = True,
               warm_up: bool = False) -> web.Application:
    """The server application for `state`. `frontend=False` leaves out the browser editor
    (tests that only speak HTTP, and machines without the editor package). `warm_up=True`: the
    queue worker waits for `start_warm_up` (which `start_server(warm_up=True)` calls)."""
    middlewares = list(middlewares_for(state.config))
    middlewares.append(body_timeout_middleware(state.config.body_timeout))  # web/connections.py
    if state.config.multi_user:
        log.warning("--multi-user: the Comfy-User header picks a user folder; it is not authentication "
                    "(anyone who can reach the server can name any user). Use --users for logins (docs/auth.md)%s",
                    "; with --users the header is ignored" if state.config.auth is not None else "")
    if state.config.auth is not None:  # --users: one check in front of every route (web/auth/)
        from web.auth.middleware import auth_middleware
        from web.auth.service import AuthService

        if state.auth is None:
            state.auth = AuthService.open(state.store.path, state.config.auth)
        # the files of each `executed` message become readable by the prompt's owner (web/prompt_run.py)
        state.hub.on_outputs = state.auth.record_outputs
        middlewares.append(auth_middleware(state.auth))
    if state.config.compress_response_body:
        middlewares.append(compress_body)
    if state.pack_load is not None:  # innermost: packs import after the server listens (web/pack_start.py)
        middlewares.append(late_pack_routes(state, state.pack_load.pack_app))
    app = _app_with(state, middlewares)
    app[STATE_KEY] = state
    app[_WARM_UP] = warm_up
    app[_WARM_UP_TASK] = []
    # what the queue worker waits for: torch (the warm-up) and packs imported after listening
    app[_WORKER_GATES] = {name for name, closed in (("runtime", warm_up), ("packs", state.pack_load is not None))
                          if closed}
    tables = [prompt_routes(), jobs_routes(), info_routes(), file_routes(), ws_routes(), library_routes(state)]
    tables.append(log_routes(app))  # /internal/logs* (web/routes_logs.py)
    tables.append(subgraph_routes(state))  # /global_subgraphs*, /node_replacements (web/routes_subgraphs.py)
    tables.append(workflow_routes())  # POST /workflow/to_prompt (web/routes_workflow.py)
    tables.append(queue_routes())  # /api/queue/{state,pause,resume,move,priorities}, /api/jobs/{id}/retry
    if state.auth is not None:
        from web.auth.routes import auth_routes

        tables.append(auth_routes())  # /auth/login, /auth/logout, /auth/me, /auth/tokens, /auth/users
    for table in [*tables, *state.extra_routes, *extra_routes]:
        add_api_routes(app, table)
    state.user_data = add_userdata_routes(app, state)  # /users, /settings, /userdata, /i18n (web/userdata.py)
    add_asset_routes(app, state)  # /api/assets*, /api/tags (web/routes_assets.py; 503 without --enable-assets)
    add_v2_routes(app, state)  # Comfy's API v2, /api/v2/jobs*, /api/v2/assets*, /api/v2/health (web/routes_v2.py)
    served_editor = False
    if frontend:
        try:
            # --front-end-root: another editor build, served as it is (no version pin).
            editor.add_frontend_routes(app, state, root=state.config.front_end_root)
            served_editor = True
        except editor.FrontendError as exc:
            log.warning("browser editor not served: %s", exc)
    if not served_editor:
        async def list_extensions(request: web.Request) -> web.Response:
            return web.json_response(extension_urls(state, editor.OWN_EXTENSION_DIR))
        add_api_routes(app, [web.get("/extensions", list_extensions)])
    app.on_startup.append(_on_startup)
    app.on_shutdown.append(_on_shutdown)
    app.on_cleanup.append(_on_cleanup)
    return app


def _app_with(state: AppState, middlewares: list) -> web.Application:
    """A new application, or the one packs already added routes and middlewares to
    (`state.pack_app`, ComfyUI's `PromptServer.instance.app`) with ours put in front of theirs:
    ComfyUI's own middlewares come first in its list, packs append after them."""
    app = state.pack_app
    if app is None:
        return web.Application(client_max_size=state.config.max_upload_bytes, middlewares=middlewares)
    if app.frozen:
        log.warning("the packs' application was already served once; this app leaves out what they added to it")
        return web.Application(client_max_size=state.config.max_upload_bytes, middlewares=middlewares)
    for index, middleware in enumerate(middlewares):
        app.middlewares.insert(index, middleware)
    return app


_COMPRESSED_TYPES = frozenset({"application/json", "text/plain"})


@web.middleware
async def compress_body(request: web.Request, handler: Callable) -> web.StreamResponse:
    """--enable-compress-response-body: gzip JSON and plain-text bodies for clients that accept
    gzip (after ComfyUI's server.py compress_body)."""
    response = await handler(request)
    if (isinstance(response, web.Response) and response.content_type in _COMPRESSED_TYPES and response.body
            and "gzip" in request.headers.get("Accept-Encoding", "")):
        response.enable_compression()
    return response


def ssl_context(config: ServerConfig) -> ssl.SSLContext | None:
    """The server's TLS context from --tls-certfile/--tls-keyfile (None: plain HTTP). Clients are
    not asked for certificates, as in ComfyUI."""
    if not config.tls:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certfile=str(config.tls_certfile), keyfile=str(config.tls_keyfile))
    return context


async def _on_startup(app: web.Application) -> None:
    state = app[STATE_KEY]
    state.hub.attach(asyncio.get_running_loop())
    if state.config.ray is not None:
        # --ray: prompts run on Ray worker actors; imported only here, so the default start-up never loads Ray.
        from web.ray_backend.dispatcher import RayDispatcher

        state.worker = RayDispatcher(state)
    else:
        state.worker = QueueWorker(state.queue, state.hub, state.executor, state.store, memory=state.env.memory,
                                   preview_size=state.config.preview_size, assets=output_assets(app))
    # a pack's replacement of PromptServer.send_sync sees the prompts' events (web/prompt_routing.py)
    state.worker.event_relay = lambda: state.event_relay() if state.event_relay is not None else None
    _open_worker_gate(app, None)


def _open_worker_gate(app: web.Application, gate: str | None) -> None:
    """`gate` is open (None: none yet); start the queue worker once none is left closed, never
    once shutdown has cancelled the background tasks."""
    state = app[STATE_KEY]
    app[_WORKER_GATES].discard(gate)
    shutting_down = any(t.cancelling() or t.cancelled() for t in app[_WARM_UP_TASK])
    if (not app[_WORKER_GATES] and state.worker is not None and not state.worker.started
            and not shutting_down):
        state.worker.start()


def start_pack_load(app: web.Application) -> asyncio.Task:
    """Import the packs in the background (web/pack_start.py); the queue worker waits for it."""
    task = asyncio.get_running_loop().create_task(
        run_deferred_load(app, app[STATE_KEY], on_done=lambda: _open_worker_gate(app, "packs"),
                          add_routes=add_api_routes),
        name="pack-load")
    app[_WARM_UP_TASK].append(task)
    return task


def start_warm_up(app: web.Application) -> asyncio.Task:
    """Load torch and the nodes' runtime in a worker thread (web.warmup.warm_up); the event loop
    keeps serving meanwhile. The queue worker starts once torch is imported; the rest of the
    runtime loads while no prompt runs or waits. Cancelled on shutdown."""
    from web.warmup import warm_up

    state = app[STATE_KEY]
    loop = asyncio.get_running_loop()

    def start_worker() -> None:  # on the event loop
        _open_worker_gate(app, "runtime")

    def busy() -> bool:  # read from the warm-up thread: plain reads
        # a prompt runs or waits, or packs are importing in the background (they import what they
        # need themselves; the rest of the runtime would only compete with them for the interpreter)
        return state.queue.remaining > 0 or (state.pack_load is not None and not state.pack_load.done)

    imported = None
    if state.pack_load is not None and not state.pack_load.done:
        # the packs' background import (start_pack_load) waits for the warm-up's own imports
        imported = state.pack_load.runtime_imported = threading.Event()

    async def run() -> None:
        try:
            await loop.run_in_executor(None, functools.partial(
                warm_up, state.env, deterministic=state.config.deterministic,
                runtime_ready=lambda: loop.call_soon_threadsafe(start_worker), busy=busy, imported=imported))
        except Exception:  # noqa: BLE001 -- nodes then load what they need when they run
            log.exception("loading the runtime in the background failed")
        start_worker()

    task = asyncio.get_running_loop().create_task(run(), name="warm-up")
    app[_WARM_UP_TASK].append(task)
    return task


def warm_up_task(app: web.Application) -> asyncio.Task | None:
    """The app's background warm-up (`start_warm_up`), or None when it has none."""
    tasks = [t for t in app[_WARM_UP_TASK] if t.get_name() == "warm-up"]
    return tasks[0] if tasks else None


async def _on_shutdown(app: web.Application) -> None:
    state = app[STATE_KEY]
    for task in app[_WARM_UP_TASK]:
        task.cancel()  # the import thread finishes on its own; the worker is not started
    if state.worker is not None:  # the running prompt is interrupted and recorded first
        await state.worker.stop()
    await state.hub.close_all()
    pack_app = state.pack_load.pack_app if state.pack_load is not None else None
    if pack_app is not None and pack_app.frozen:  # its on_startup hooks ran (web/pack_start.py)
        await pack_app.shutdown()
        await pack_app.cleanup()


async def _on_cleanup(app: web.Application) -> None:
    state = app[STATE_KEY]
    state.store.close()
    if state.auth is not None:
        state.auth.close()
        state.auth = None  # a later app on this state opens it again


async def start_server(state: AppState, *, frontend: bool = True, extra_routes: Iterable[web.RouteTableDef] = (),
                       warm_up: bool = False) -> tuple[web.AppRunner, list[str]]:
    """Start listening on every `--listen` address; returns the runner and the bound URLs
    (port 0 picks a free port, which the URLs then show). `warm_up=True`: once listening, load
    the runtime in the background, then start the queue worker (`start_warm_up`)."""
    app = create_app(state, extra_routes=extra_routes, frontend=frontend, warm_up=warm_up)
    # keepalive_timeout doubles as the request-head timeout (web/connections.py)
    runner = LimitedAppRunner(app, access_log=None, handle_signals=False,
                              keepalive_timeout=state.config.header_timeout,
                              max_connections_per_client=state.config.max_connections_per_client)
    await runner.setup()
    try:
        context = ssl_context(state.config)
        for host in state.config.listen:
            await web.TCPSite(runner, host, state.config.port, ssl_context=context).start()
    except BaseException:
        await runner.cleanup()
        raise
    if warm_up:
        start_warm_up(app)
    if state.pack_load is not None:
        start_pack_load(app)
    scheme = state.config.scheme
    urls = []
    for address in runner.addresses:
        host, port = address[0], address[1]
        urls.append(f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}")
    return runner, urls


async def serve_forever(state: AppState, *, frontend: bool = True,
                        on_ready: Callable[[list[str]], Awaitable[None] | None] | None = None,
                        stop_signals: Iterable[int] = (), warm_up: bool = False) -> None:
    """Serve until cancelled or until one of `stop_signals` (main.py: SIGINT, SIGTERM) arrives;
    then shut down cleanly: the running prompt is recorded as interrupted. `warm_up`: see
    `start_server`."""
    runner, urls = await start_server(state, frontend=frontend, warm_up=warm_up)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    installed = []
    for sig in stop_signals:
        try:
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or no such signal here
            pass
    try:
        if on_ready is not None:
            result = on_ready(urls)
            if asyncio.iscoroutine(result):
                await result
        await stop.wait()
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        await runner.cleanup()
