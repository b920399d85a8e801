"""The per-server state that ComfyUI's module-level APIs read (folders, routes, registry, sockets).

ComfyUI keeps this state in module globals (`folder_paths.folder_names_and_paths`,
`PromptServer.instance`, `nodes.NODE_CLASS_MAPPINGS`). Here it lives in one `CompatSession`
per server, and the facades look it up with `active()`:

1. the session set in a context variable: around pack imports (`import_context`), before
   every node call (`before_node_call`, which the executor runs in the calling task), in the
   context that binds the server (`bind`, so the server's request handlers inherit it) and
   around packs' route handlers; so two servers in one process (tests) each see their own;
2. otherwise the session of the most recent `install` (held by the import hook itself), for
   code that runs outside both, e.g. a thread a pack started, or VALIDATE_INPUTS.
"""
from __future__ import annotations

import contextlib
import inspect
import logging
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Iterator, Mapping

from comfy_core import extension_points
from comfy_core.extension_points import ExtensionPoints
from compat import extras_modules, finder, node_facades
from compat.active import CompatNotInstalledError, _active, active
from graph.context import current
from nodes.environment import host_env

__all__ = ["CompatNotInstalledError", "CompatSession", "active"]

if TYPE_CHECKING:
    from graph.packs import PackResult
    from graph.registry import Registry

log = logging.getLogger(__name__)


class CompatSession:
    """What one server exposes to packs; see the module docstring."""

    def __init__(self, env: Any, registry: "Registry", *, comfy_args: Mapping[str, Any] | None = None) -> None:
        from aiohttp import web

        self.env = env
        self.registry = registry
        # ComfyUI's `args` (attribute name -> value) as the host parsed them, for comfy.cli_args;
        # given by the host before packs import, so packs reading flags at import see them.
        self.comfy_args: Mapping[str, Any] | None = comfy_args
        self.routes = web.RouteTableDef()  # PromptServer.instance.routes
        self.on_prompt_handlers: list[Any] = []
        self.state: Any = None  # web.state.AppState once bound
        self.packs: list["PackResult"] = []
        self.prestartup: list[Any] = []  # compat.startup.PrestartupResult
        self._prestartup_ran_for: tuple[Any, ...] | None = None  # (folders, whitelist) run_prestartup had
        self.v3_nodes: dict[str, list[str]] = {}  # pack name -> node ids from comfy_entrypoint
        self.v3_errors: dict[str, str] = {}  # pack name -> traceback of a failed comfy_entrypoint
        # folder kinds packs declare (folder_paths.folder_names_and_paths) -> file extensions
        self.extensions: dict[str, set[str]] = {}
        self.prompt_server: Any = None  # compat.prompt_server.PromptServer, made on first use
        # ComfyUI's `server.last_node_id`: the display id of the node that last started running
        self.last_node_id: str | None = None
        self.node_class_mappings: Any = None  # nodes.NODE_CLASS_MAPPINGS (compat.node_facades), on first read
        self._app: Any = None  # the aiohttp Application packs added to (pack_app), made on first use
        # ComfyUI's `nodes.EXTENSION_WEB_DIRS` ({pack name: web folder}): loaded packs' WEB_DIRECTORY,
        # plus what packs put in it themselves (Impact-Pack does); `bind` serves every entry.
        self.extension_web_dirs: dict[str, str] = {}
        # What packs changed of the runtime (their assignments to ComfyUI's replaceable names,
        # compat/facade.py), in force in every context this session is active in.
        self.extension_points = ExtensionPoints()
        # io.NodeReplace records packs registered before `bind` (comfy_entrypoint's on_load runs
        # while packs load, before the server state exists); `bind` hands them to the server's table.
        self._node_replacements: list[Any] = []

    @classmethod
    def install(cls, env: Any, registry: "Registry", *, comfy_args: Mapping[str, Any] | None = None
                ) -> "CompatSession":
        session = cls(env, registry, comfy_args=comfy_args)
        finder.install(session)
        return session

    # -- making this session the one packs see ------------------------------------------------
    @contextlib.contextmanager
    def activate(self) -> Iterator["CompatSession"]:
        """This session (and its registry, for `nodes.NODE_CLASS_MAPPINGS`) for the block."""
        token = _active.set(self)
        points_token = extension_points.set_current(self.extension_points)
        env_token = host_env.set(self.env)
        try:
            yield self
        finally:
            host_env.reset(env_token)
            extension_points.reset_current(points_token)
            _active.reset(token)

    def import_context(self) -> contextlib.AbstractContextManager:
        """graph.packs' `import_context`: the import hook is in place and this session active;
        shared modules the import drops from `sys.modules` come back (compat/pack_imports.py)."""
        from compat.pack_imports import keep_shared_modules

        finder.install(self)
        stack = contextlib.ExitStack()
        roots = self.env.folders.paths("custom_nodes") if "custom_nodes" in self.env.folders.kinds() else []
        stack.enter_context(keep_shared_modules(roots))
        stack.enter_context(self.activate())
        return stack

    @staticmethod
    def prepare_surface_module(module: Any) -> None:
        """The import hook's last step for each surface module it loads (compat/finder.py): a
        `FacadeModule`, so it answers ComfyUI's re-exported names (compat/reexports.py)."""
        from compat.facade import as_facade

        as_facade(module)

    def before_node_call(self, unique_id: str, call_index: int, graph_index: int) -> None:
        """The executor's hook before each node call (in the calling task): selects this session,
        sets ComfyUI's `GraphBuilder.set_default_prefix(unique_id, call_index, graph_index)` and
        `server.last_node_id` (ComfyUI's executor sets it before each node it runs)."""
        from compat.graph_builder import GraphBuilder

        _active.set(self)
        extension_points.set_current(self.extension_points)
        GraphBuilder.set_default_prefix(unique_id, call_index, graph_index)
        ctx = current()
        if ctx is not None:
            self.last_node_id = ctx.display_node_id

    # -- loading packs --------------------------------------------------------------------------
    def run_prestartup(self, dirs: Iterable[str | os.PathLike], *, whitelist: Iterable[str] | None = None
                       ) -> list[Any]:
        """Packs' prestartup scripts. ComfyUI runs them before it imports torch or any node, so
        a host calls this first (web/bootstrap.py); `load_packs` then does not run them again."""
        from compat.startup import run_prestartup_scripts

        dirs = [Path(d) for d in dirs]
        allowed = list(whitelist) if whitelist is not None else None
        _forget_modules_under(dirs)
        # ComfyUI's folder_paths lists the custom-node folders as kind "custom_nodes"; prestartup
        # scripts (ComfyUI-Manager's) ask for them first thing.
        known = set(self.env.folders.paths("custom_nodes")) if "custom_nodes" in self.env.folders.kinds() else set()
        for folder in dirs:
            if folder.resolve() not in known:
                self.env.folders.add("custom_nodes", folder)
        with self.import_context():
            self.prestartup = run_prestartup_scripts(dirs, whitelist=allowed)
        self._prestartup_ran_for = (tuple(dirs), allowed)
        return self.prestartup

    def load_packs(self, dirs: Iterable[str | os.PathLike], *, whitelist: Iterable[str] | None = None
                   ) -> list["PackResult"]:
        """Prestartup scripts (unless `run_prestartup` ran them for these folders), then the
        modules ComfyUI has imported by then and the folders as places of `custom_nodes`
        (compat/startup.py), then every pack (ComfyUI's start-up order); results are kept for
        GET /custom_nodes/status."""
        from compat.startup import expose_custom_nodes_package, import_startup_modules
        from graph.packs import load_custom_nodes

        dirs = [Path(d) for d in dirs]
        allowed = list(whitelist) if whitelist is not None else None
        if self._prestartup_ran_for != (tuple(dirs), allowed):
            self.run_prestartup(dirs, whitelist=allowed)  # forgets earlier servers' pack modules first
        self._prestartup_ran_for = None  # a later load_packs (another server's folders) runs them again
        with self.import_context():
            import_startup_modules()
            expose_custom_nodes_package(dirs)
        self.packs = load_custom_nodes(self.registry, dirs, whitelist=allowed, import_context=self.import_context,
                                       module_hooks=[self.module_hook])
        for pack in self.packs:
            if pack.ok and pack.web_directory is not None:
                self.extension_web_dirs.setdefault(pack.name, str(pack.web_directory))
        return self.packs

    def load_custom_node(self, path: Path, *, ignore: Iterable[str] = ()) -> "PackResult":
        """One pack loaded (or loaded again) while the server runs (ComfyUI's
        `nodes.load_custom_node`, compat/pack_loading_api.py): its result takes the place of an
        earlier one of the same pack in the status record, and `nodes.NODE_CLASS_MAPPINGS`
        holds its classes (ComfyUI assigns them, replacing what a reload replaced)."""
        from graph.packs import load_custom_node

        with self.activate():
            result = load_custom_node(self.registry, path, import_context=self.import_context,
                                      module_hooks=[self.module_hook], ignore=ignore)
            if result.ok:
                mappings = node_facades.node_class_mappings()
                declared = getattr(result.module, "NODE_CLASS_MAPPINGS", None) or {}
                for class_type in result.nodes:
                    if class_type in declared:
                        mappings[class_type] = declared[class_type]
                if result.web_directory is not None:
                    self.extension_web_dirs[result.name] = str(result.web_directory)
        for packs in (self.packs, getattr(self.state, "packs", None)):
            if isinstance(packs, list):
                packs[:] = [p for p in packs if p.name != result.name] + [result]
        return result

    def module_hook(self, module: ModuleType, pack_name: str, registry: "Registry") -> None:
        """graph.packs' module hook: registers a V3 pack's `comfy_entrypoint()` nodes."""
        from compat.v3.discovery import register_entrypoint

        register_entrypoint(self, module, pack_name, registry)

    # -- the server -----------------------------------------------------------------------------
    def pack_app(self) -> Any:
        """ComfyUI's `PromptServer.instance.app`: one `aiohttp.web.Application` per session, made
        on first read with ComfyUI's `client_max_size` (`--max-upload-size` MB, default 100) and
        no middlewares yet. `bind` hands it to the server state, and the host's app factory
        builds the served app on it (web/app.py), so what packs add at import time is served."""
        if self._app is None:
            from aiohttp import web

            megabytes = float((self.comfy_args or {}).get("max_upload_size", 100))
            self._app = web.Application(client_max_size=round(megabytes * 1024 * 1024))
        return self._app

    def bind(self, state: Any) -> None:
        """Attach to a built server state (web.state.AppState) before its app is created: packs'
        routes and on_prompt handlers are served, send_sync reaches its sockets, and
        GET /custom_nodes/status lists the packs.

        With `state.pack_load` (packs import after the server listens, web/pack_start.py) the
        application packs fill stays apart from the served one, which is frozen before they
        import; web/pack_start.py serves its routes and middlewares once they have."""
        from compat.status import status_routes

        self.state = state
        pack_load = getattr(state, "pack_load", None)  # hosts' states without the field: packs loaded first
        if pack_load is None:
            # The application packs see as PromptServer.instance.app is the one served, also when
            # a pack first reads it later (once served, its router is frozen, as in ComfyUI).
            state.pack_app = self.pack_app()
            state.extra_routes.append(self.routes_in_session())
        else:
            pack_load.pack_app = self.pack_app()
            pack_load.session = self
        self.serve_extension_web_dirs(state)
        state.extra_routes.append(status_routes(self))
        if hasattr(state, "prompt_validation"):
            state.prompt_validation = self.replaced_validate_prompt
        if hasattr(state, "event_relay"):
            state.event_relay = self.replaced_send_sync
        state.on_prompt_handlers.extend(self.on_prompt_handlers)
        self.on_prompt_handlers = state.on_prompt_handlers  # later additions go straight there
        for replacement in self._node_replacements:
            state.node_replacements.register(replacement)
        self._node_replacements.clear()
        # The caller goes on to start the server in this context, so the server's tasks (request
        # handlers: validation, /object_info's INPUT_TYPES, packs' routes calling built-in nodes)
        # inherit this session and its environment.
        _active.set(self)
        host_env.set(self.env)
        extension_points.set_current(self.extension_points)

    def register_node_replacement(self, replacement: Any) -> None:
        """ComfyUI's `PromptServer.instance.node_replace_manager.register`: an `io.NodeReplace`
        for this server's table (`state.node_replacements`, GET /node_replacements, applied on
        POST /prompt); kept until `bind` when the server state does not exist yet."""
        if self.state is not None:
            self.state.node_replacements.register(replacement)
        else:
            self._node_replacements.append(replacement)

    def serve_extension_web_dirs(self, state: Any) -> None:
        """Entries packs wrote into `nodes.EXTENSION_WEB_DIRS` are served like WEB_DIRECTORY
        folders: on the pack of that name, or as a web-only entry of their own."""
        from graph.packs import PackResult

        if not self.extension_web_dirs:
            return
        by_name = {pack.name: pack for pack in state.packs}
        for name, folder in self.extension_web_dirs.items():
            pack = by_name.get(name)
            if pack is not None:
                pack.web_directory = Path(folder)
            else:
                state.packs.append(PackResult(name=name, path=Path(folder), ok=True, error=None, seconds=0.0,
                                              web_directory=Path(folder), module=None))

    def routes_in_session(self) -> Any:
        """Packs' routes, each handler run with this session active (so its `folder_paths` and
        `PromptServer.instance` are this server's even when several servers share a process)."""
        import functools
        import inspect

        from aiohttp import web

        table = web.RouteTableDef()
        for route in self.routes:
            if isinstance(route, web.RouteDef) and inspect.iscoroutinefunction(route.handler):
                @functools.wraps(route.handler)
                async def handler(request: Any, _inner: Any = route.handler) -> Any:
                    with self.activate():
                        return await _inner(request)
                table.route(route.method, route.path, **route.kwargs)(handler)
            else:  # static folders, class-based views: as they are
                table._items.append(route)  # noqa: SLF001 -- RouteTableDef has no public add
        return table

    def replaced_send_sync(self) -> Callable[[str, Any, str | None], None] | None:
        """`PromptServer.send_sync` as a pack replaced it, as the server calls it for each
        execution event (`send(event, data, client_id)`, in this session), or None when no pack
        did (compat/prompt_server.py `replaced_send_sync`)."""
        server_module = sys.modules.get("compat.prompt_server")  # not imported: no pack reached the server
        replacement = server_module.replaced_send_sync(self) if server_module is not None else None
        if replacement is None:
            return None

        def send(event: str, data: Any, client_id: str | None) -> None:
            with self.activate():
                replacement(event, data, client_id)

        return send

    def replaced_validate_prompt(self) -> Callable[[str, dict, Any], Awaitable[Any]] | None:
        """ComfyUI's `execution.validate_prompt` as a pack replaced it in this session, as the
        server calls it (`await validate(prompt_id, prompt, partial_targets)`, in this session,
        answering ComfyUI's `(ok, error, good_outputs, node_errors)`), or None when no pack did.
        (A pack that puts the built-in back routes through it: the same validation.)"""
        replacement = self.extension_points.prompt_validation
        if replacement is None:
            return None

        async def validate(prompt_id: str, prompt: dict, partial_targets: Any) -> Any:
            with self.activate():
                result = replacement(prompt_id, prompt, partial_targets)
                return await result if inspect.isawaitable(result) else result

        return validate

    # -- ComfyUI's `nodes` module -------------------------------------------------------------
    def generated_module_spec(self, fullname: str) -> Any:
        """The import spec of a `comfy_extras.nodes_*` module that has no file in the surface:
        generated from the built-in nodes ComfyUI keeps there (compat/extras_modules.py), or None."""
        return extras_modules.generated_spec(fullname)

    def module_attribute(self, module: str, name: str) -> Any:
        """ComfyUI's module-level name `name` of module `module` that our own package of that
        name leaves to the compat layer: `nodes.NODE_CLASS_MAPPINGS`, `nodes.KSampler`, ...
        (compat/node_facades.py, which answers for the active session). The import hook
        (compat.finder) passes our `nodes` package's unknown attributes here."""
        if module != "nodes":
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        if name == "EXTENSION_WEB_DIRS":
            return active().extension_web_dirs
        return node_facades.attribute(name)

    # -- folders ----------------------------------------------------------------------------
    @property
    def folders(self) -> Any:
        return self.env.folders

    def directory(self, kind: str) -> Path:
        """output / input / temp / user folder of the environment."""
        return Path(getattr(self.env, f"{kind}_dir"))

    @property
    def preview_size(self) -> int:
        config = getattr(self.state, "config", None)
        return int(getattr(config, "preview_size", 512))


def _forget_modules_under(dirs: list[Path]) -> None:
    """Drop modules an earlier load imported from these folders (a pack's submodules), so a
    second server in the same process imports each pack afresh, as a new process would: its
    import-time registrations (routes, folders) then reach this session too."""
    import sys

    roots = [str(d.resolve()) + os.sep for d in dirs]
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if file and any(os.path.abspath(file).startswith(root) for root in roots):
            del sys.modules[name]
