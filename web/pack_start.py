"""Serving before the custom-node packs have imported: the last start's record of the packs.

ComfyUI imports every pack before it listens, so with a few dozen packs installed the editor waits
20 s or more for a page (slow start with many packs is one of its users' top complaints). Nearly
all of that time is the packs' own imports (torch, diffusers, ...). Here a start whose pack code,
engine and Python environment are unchanged since the last complete pack load listens at once and
imports the packs in the background, answering from that load's *record* meanwhile:

- `/object_info` (and `/object_info/{cls}`) answers the built-in nodes live and the packs' nodes
  from the record, as long as the model and input folders still list what they listed when it was
  written (pack nodes' combos list them); otherwise it waits for the import and answers live.
- `/extensions`, the packs' web folders, their locales and blueprints are served from the packs'
  folders as recorded (the editor's first page needs only these).
- Everything that needs a pack's code waits for the import to finish: `POST /prompt` (and every
  other submission path), workflow conversion, the queue worker (pending prompts restored from the
  store included), and any route the server itself does not have (a pack's route cannot be
  known before its import). A pack's route is then served from `PromptServer.instance.app`, which
  packs fill at import time as on ComfyUI, through its own middlewares.

What is recorded (`PackRecord`, `<user dir>/pack_record.json`): the fingerprint of the inputs, the
load's `PackResult`s (without modules), the `EXTENSION_WEB_DIRS` entries, each pack node's
`/object_info` entry and the folder listings those entries were rendered against. The fingerprint
covers the code files of every pack folder (path, size, modification time; data files are left out
because packs rewrite their own configs at every import), the engine's pack-facing packages, the
Python version and executable, the modification time of each site-packages folder (installing or
removing a package changes it), and the whitelist. A start without a valid record imports packs
before it listens, as before, and writes one.
"""
from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

from aiohttp import web

if TYPE_CHECKING:
    from web.state import AppState

log = logging.getLogger(__name__)

RECORD_NAME = "pack_record.json"
RECORD_FORMAT = 2
ENGINE_ROOT = Path(__file__).resolve().parents[1]
# The engine packages whose code decides what a pack's import registers (ComfyUI's import surface,
# the built-in node classes packs subclass, the loader itself).
ENGINE_PACKAGES = ("compat", "graph", "nodes")
# What a pack's import and its web extension run: edits to these invalidate the record. Data files
# are left out on purpose (see the module docstring).
CODE_SUFFIXES = frozenset({".py", ".so", ".pyd", ".js", ".mjs"})
_SKIPPED_DIRS = frozenset({".git", "__pycache__", "node_modules", ".venv"})


# -- the record -----------------------------------------------------------------------------------
def fingerprint(pack_dirs: Iterable[Path], whitelist: Iterable[str] | None = None, *,
                engine_root: Path = ENGINE_ROOT, package_folders: Iterable[str] | None = None) -> str:
    """A digest of everything a pack load depends on besides the model folders (module docstring)."""
    digest = hashlib.sha256()

    def add(*parts: object) -> None:
        digest.update(("\0".join(map(str, parts)) + "\n").encode("utf-8", "surrogateescape"))

    add("format", RECORD_FORMAT, sys.version, sys.executable)
    add("whitelist", *sorted(whitelist) if whitelist is not None else ["<all>"])
    for entry in package_folders if package_folders is not None else installed_package_folders():
        try:
            add("path", entry, os.stat(entry).st_mtime_ns)
        except OSError:
            add("path", entry, "-")
    for package in ENGINE_PACKAGES:
        _add_tree(add, engine_root / package)
    for folder in pack_dirs:
        _add_tree(add, Path(folder))
    return digest.hexdigest()


def installed_package_folders() -> list[str]:
    """The `site-packages` / `dist-packages` folders on `sys.path`: installing, upgrading or removing a
    package adds or removes an entry in one, which moves its modification time. (Not every `sys.path`
    entry: packs append their own folders at import, and a base directory that is the script's
    folder changes whenever the server makes its temp folder.)"""
    return sorted({entry for entry in sys.path if os.path.basename(entry.rstrip(os.sep)) in ("site-packages",
                                                                                             "dist-packages")})


def _add_tree(add: Callable[..., None], root: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIPPED_DIRS)
        for name in sorted(filenames):
            if os.path.splitext(name)[1].lower() not in CODE_SUFFIXES:
                continue
            path = os.path.join(dirpath, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            add("file", os.path.relpath(path, root.parent), st.st_size, st.st_mtime_ns)


def folder_listings(env: Any) -> dict[str, dict]:
    """What pack nodes' combos are rendered from: for each model folder kind, its folders and every
    file under them; and the input folder's files (kind "<input>")."""
    folders = env.folders
    listings = {}
    for kind in sorted(folders.kinds()):
        if kind == "custom_nodes":  # the packs' own folders: they write there at import (code is fingerprinted)
            continue
        paths = [str(p) for p in folders.paths(kind)]
        listings[kind] = {"paths": paths, "files": files_under(paths)}
    listings["<input>"] = {"paths": [str(env.input_dir)], "files": files_under([str(env.input_dir)], recursive=False)}
    return listings


def listings_current(env: Any, recorded: dict[str, dict]) -> bool:
    """Whether the folders still list what `recorded` (a record's `folder_listings`) says. Kinds a
    pack adds at import (ComfyUI's `folder_paths.add_model_folder_path`) are not known before the
    import, so each recorded kind is listed from its recorded folders; a kind the server knows now
    must also have the same folders."""
    known = set(env.folders.kinds())
    for kind, entry in recorded.items():
        if kind in known and [str(p) for p in env.folders.paths(kind)] != entry["paths"]:
            return False
        if files_under(entry["paths"], recursive=kind != "<input>") != entry["files"]:
            return False
    return True


def files_under(paths: Iterable[str], *, recursive: bool = True) -> list[str]:
    """Every file under `paths` (links followed, hidden files and folders left out, as the model
    folders list them: comfy_core.folders.walk_folder), relative with forward slashes, sorted."""
    from comfy_core.folders import walk_folder

    found: set[str] = set()
    for root in paths:
        if not os.path.isdir(root):
            continue
        if not recursive:
            found.update(e.name for e in os.scandir(root) if e.is_file() and not e.name.startswith("."))
            continue
        for dirpath, filenames in walk_folder(Path(root)):
            relative = os.path.relpath(dirpath, root)
            for name in filenames:
                if not name.startswith("."):
                    found.add(name if relative == "." else f"{relative}/{name}".replace(os.sep, "/"))
    return sorted(found)


@dataclass
class PackRecord:
    """One complete pack load, as the next start serves it until its own load finishes."""

    fingerprint: str
    packs: list[dict]
    extension_web_dirs: dict[str, str]
    node_info: dict[str, dict]
    listings: dict[str, dict]  # folder_listings() when node_info was rendered

    def pack_results(self) -> list[Any]:
        from graph.packs import PackResult

        return [PackResult(name=p["name"], path=Path(p["path"]), ok=p["ok"], error=p.get("error"),
                           seconds=p.get("seconds", 0.0),
                           web_directory=Path(p["web_directory"]) if p.get("web_directory") else None,
                           module=None, nodes=list(p.get("nodes", ())))
                for p in self.packs]

    def to_json(self) -> dict:
        return {"format": RECORD_FORMAT, "fingerprint": self.fingerprint, "packs": self.packs,
                "extension_web_dirs": self.extension_web_dirs, "node_info": self.node_info,
                "listings": self.listings}

    @classmethod
    def from_json(cls, data: Any) -> "PackRecord | None":
        if not isinstance(data, dict) or data.get("format") != RECORD_FORMAT:
            return None
        try:
            return cls(fingerprint=str(data["fingerprint"]), packs=list(data["packs"]),
                       extension_web_dirs=dict(data["extension_web_dirs"]), node_info=dict(data["node_info"]),
                       listings={k: {"paths": list(v["paths"]), "files": list(v["files"])}
                                 for k, v in data["listings"].items()})
        except (KeyError, TypeError, ValueError, AttributeError):
            return None


def record_path(user_dir: Path) -> Path:
    return Path(user_dir) / RECORD_NAME


def read_record(user_dir: Path, expected_fingerprint: str) -> PackRecord | None:
    """The record in `user_dir` when it was written for `expected_fingerprint`, else None (none
    yet, unreadable, or the packs / engine / environment changed since)."""
    path = record_path(user_dir)
    try:
        record = PackRecord.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None
    if record is None or record.fingerprint != expected_fingerprint:
        return None
    return record


def make_record(fingerprint_: str, packs: list[Any], extension_web_dirs: dict[str, str], registry: Any,
                env: Any) -> PackRecord:
    """The record of a finished load: the pack nodes' `/object_info` entries rendered now, with the
    folder listings they were rendered against (listed first: a file added while rendering then
    makes the record stale rather than wrong)."""
    listings = folder_listings(env)
    info = registry.object_info(env, [name for name in list(registry) if not registry.is_builtin(name)])
    packs_json = [{"name": p.name, "path": str(p.path), "ok": p.ok, "error": p.error, "seconds": p.seconds,
                   "web_directory": str(p.web_directory) if p.web_directory else None, "nodes": list(p.nodes)}
                  for p in packs]
    return PackRecord(fingerprint_, packs_json, dict(extension_web_dirs), info, listings)


def write_record(user_dir: Path, record: PackRecord) -> None:
    """Write atomically (a start reading it half-written would find no record, never a wrong one)."""
    path = record_path(user_dir)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(record.to_json()), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("cannot write the pack record %s: %s (the next start imports packs before it listens)", path, exc)
        tmp.unlink(missing_ok=True)


# -- the load in the background -------------------------------------------------------------------
@dataclass
class DeferredPackLoad:
    """The packs' import that a server runs after it starts listening (`AppState.pack_load`).

    `run()` (a worker thread) imports the packs; `done` turns true (on the event loop) once their
    routes are mounted and `AppState.packs` is the real list; `wait()` returns then."""

    record: PackRecord
    load: Callable[[], list[Any]]  # imports the packs (blocking); returns their PackResults
    fingerprint_after: Callable[[], str]
    builtin_names: frozenset[str]
    # set by compat's session when it binds to the state: PromptServer.instance.app (filled by packs
    # at import) and the session itself (its routes table, EXTENSION_WEB_DIRS)
    pack_app: web.Application | None = None
    session: Any = None
    started: float = field(default_factory=time.perf_counter)
    results: list[Any] | None = None
    error: BaseException | None = None
    _finished: threading.Event = field(default_factory=threading.Event)
    # set when the background task has ended: packs served and the next record written (or not needed)
    settled: threading.Event = field(default_factory=threading.Event)
    _waiters: list[asyncio.Future] = field(default_factory=list)
    # set by the server's background warm-up (web/warmup.py `warm_up(imported=)`) once it has imported
    # torch; None when the server warms up nothing. `run` waits for it: CPython imports a submodule
    # without waiting for its parent package that another thread is still initialising (importlib
    # only checks that the parent is in sys.modules), so a pack's `import torch.nn.functional`
    # during the warm-up's `import torch` met a half-built torch ("partially initialized module
    # 'torch' has no attribute 'types'"). ComfyUI imports packs with nothing else importing.
    runtime_imported: threading.Event | None = None

    @property
    def done(self) -> bool:
        return self._finished.is_set()

    async def wait(self) -> None:
        if self.done:
            return
        future = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        await future

    def finish(self) -> None:
        """On the event loop: wake every waiter."""
        self._finished.set()
        for future in self._waiters:
            if not future.done():
                future.set_result(None)
        self._waiters.clear()

    def run(self, server_loop: asyncio.AbstractEventLoop) -> list[Any]:
        """In a worker thread while `server_loop` serves in the main thread; first waits for the
        warm-up's imports (`runtime_imported`)."""
        from graph.pack_isolation import loading_beside_main_loop, main_fallback_loop

        if self.runtime_imported is not None:
            self.runtime_imported.wait()

        # Packs call asyncio.get_event_loop() at import: they get the loop they would get in a start
        # that imports them before listening, in the main thread.
        asyncio.set_event_loop(main_fallback_loop())
        try:
            with loading_beside_main_loop(server_loop):  # a pack's signal.signal() is set by the main thread
                self.results = self.load()
        finally:
            asyncio.set_event_loop(None)  # an executor thread: the next job starts without it
        return self.results


async def packs_ready(state: "AppState") -> None:
    """Return once the server's packs are imported (at once when they were before it listened)."""
    load = getattr(state, "pack_load", None)
    if load is not None and not load.done:
        await load.wait()


async def node_definitions(state: "AppState") -> dict:
    """Every node's `/object_info` entry, live, once packs are imported: for converting workflows."""
    await packs_ready(state)
    return await asyncio.to_thread(state.registry.object_info, state.env)


async def object_info(state: "AppState") -> dict:
    """`/object_info`'s body: live, or while packs import, built-ins live + the record's pack nodes
    (when the folders still list what the record was rendered against; else after the import)."""
    load = state.pack_load
    if load is not None and not load.done:
        if await asyncio.to_thread(_record_current, state):
            builtins = await asyncio.to_thread(state.registry.object_info, state.env, load.builtin_names)
            return {**builtins, **{k: v for k, v in load.record.node_info.items() if k not in builtins}}
        await load.wait()
    return await asyncio.to_thread(state.registry.object_info, state.env)


async def object_info_for(state: "AppState", class_type: str) -> dict:
    load = state.pack_load
    if load is not None and not load.done and class_type not in load.builtin_names:
        if class_type in load.record.node_info and await asyncio.to_thread(_record_current, state):
            return {class_type: load.record.node_info[class_type]}
        await load.wait()
    return await asyncio.to_thread(state.registry.object_info_for, class_type, state.env)


def _record_current(state: "AppState") -> bool:
    return listings_current(state.env, state.pack_load.record.listings)


def late_pack_routes(state: "AppState", pack_app: web.Application) -> Callable:
    """The innermost middleware of a server that listens before its packs import: a request the
    server's own routes do not match waits for the import, then goes to the route a pack added
    (`PromptServer.instance.routes` / `.app.router`), if any; once packs are in, every request
    passes through the middlewares packs added to `PromptServer.instance.app` (ComfyUI runs them
    after its own)."""
    @web.middleware
    async def middleware(request: web.Request, handler: Callable) -> web.StreamResponse:
        load = state.pack_load
        if request.match_info.http_exception is not None:
            await load.wait()
            if load.results is not None:
                match = await pack_app.router.resolve(request)
                if match.http_exception is None:
                    # what aiohttp's Application._handle does with the match it resolved
                    request._match_info = match  # noqa: SLF001
                    handler = match.handler
        elif not load.done:
            return await handler(request)
        for pack_middleware in reversed(pack_app.middlewares):
            if getattr(pack_middleware, "__middleware_version__", None) == 1:
                handler = functools.update_wrapper(functools.partial(pack_middleware, handler=handler), handler)
            else:  # aiohttp's old-style middleware factory (deprecated, still served by aiohttp 3)
                handler = await pack_middleware(pack_app, handler)
        return await handler(request)
    return middleware


async def run_deferred_load(app: web.Application, state: "AppState", on_done: Callable[[], None],
                            add_routes: Callable[[web.Application, Any], None]) -> None:
    """Import the packs in a worker thread, then (on the loop) serve what they added, replace the
    recorded pack list with the real one, wake the waiters, call `on_done` (the queue worker's gate)
    and write the next start's record. `add_routes(app, table)`: the app factory's registration
    (each route bare and under /api)."""
    from web.frontend import WEB_EXTENSIONS_KEY, add_pack_web_directories

    load = state.pack_load
    session = load.session
    loop = asyncio.get_running_loop()
    try:
        packs = await loop.run_in_executor(None, load.run, loop)
    except Exception as exc:  # noqa: BLE001 -- the server goes on with the built-in nodes
        log.exception("importing the custom-node packs in the background failed")
        load.error = exc
        packs = []
    try:
        pack_app = load.pack_app
        if pack_app is not None:
            add_routes(pack_app, session.routes_in_session())  # PromptServer.instance.routes
            pack_app.freeze()  # as a served app is: what packs add later is refused, as on ComfyUI
        state.packs[:] = packs
        session.serve_extension_web_dirs(state)
        if WEB_EXTENSIONS_KEY in app:
            add_pack_web_directories(app, state.packs)
        if pack_app is not None:
            await pack_app.startup()  # the on_startup hooks packs added to PromptServer.instance.app
    except Exception:  # noqa: BLE001
        log.exception("serving the packs' routes failed")
    finally:
        load.finish()
        on_done()
    log.info("custom-node packs imported in the background in %.2f s (%d packs)",
             time.perf_counter() - load.started, len(packs))
    try:
        if load.error is None:
            after = await asyncio.to_thread(load.fingerprint_after)
            # Rendered again only when something moved (the same code against the same folders
            # renders the same entries): this spares a restart the pack nodes' INPUT_TYPES() calls.
            current = await asyncio.to_thread(listings_current, state.env, load.record.listings)
            if after != load.record.fingerprint or not current:
                await asyncio.to_thread(save_record, state, after, session)
    finally:
        load.settled.set()


def save_record(state: "AppState", fingerprint_: str, session: Any) -> None:
    """Write the record of the load this server did (after it finished)."""
    try:
        record = make_record(fingerprint_, state.packs, session.extension_web_dirs, state.registry, state.env)
    except Exception:  # noqa: BLE001 -- no record: the next start imports before listening
        log.exception("cannot render the pack record")
        return
    write_record(state.env.user_dir, record)
