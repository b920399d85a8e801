"""Loading custom node packs (ComfyUI's V1 module contract, reference §4.2).

Each `custom_nodes` folder is listed in name order; every `.py` file and every folder is a pack
(a folder without `__init__.py` fails to import, as in ComfyUI). Hidden names, `__pycache__` and
names ending in `.disabled` are skipped. A pack is imported under a module name derived from its path (as ComfyUI does, so
hyphenated folder names work and relative imports inside packages resolve), then its
`NODE_CLASS_MAPPINGS` (with `NODE_DISPLAY_NAME_MAPPINGS`) are registered and `WEB_DIRECTORY`
is resolved. A pack that raises while importing is reported (name, traceback) and skipped;
every other pack still loads. A node name that is already registered (a built-in, or a name an
earlier pack took) is not overridden, and a class that is not a node (not a class, no
`INPUT_TYPES`) is not registered: both are logged and listed in `PackResult.skipped`, and the
pack's other nodes load. A class whose `FUNCTION` names no method is listed, as ComfyUI lists it,
and fails only if run.
Declaration quirks that ComfyUI accepts (an input named under both `required` and `optional`)
are registered the way ComfyUI reads them, with one warning each.
Import times are logged in one table at the end, like ComfyUI's start-up log.

Isolation goes past ComfyUI's (graph/pack_isolation.py): within `PackLimits`, a pack's import
(with its `comfy_entrypoint` registration) and each node's `INPUT_TYPES()` run in a helper
thread and are abandoned when they overrun, with a log line that says so; `os._exit()` at
import is refused like `sys.exit()`. A node whose `INPUT_TYPES()` raises or hangs is left out
of `/object_info` alone, logged with its pack, and listed in `PackResult.node_errors`.

Where the folders come from (the `custom_nodes` folder, `custom_nodes:` entries of
`extra_model_paths.yaml` via `comfy_core.folders.load_extra_model_paths`) is the host's choice.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import importlib.util
import logging
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, ContextManager, Iterable, Sequence

from graph.errors import DuplicateNodeTypeError
from graph.pack_isolation import (NodeCallGuard, PackLimits, PackTimeoutError, RegistryView, bounded,
                                  caller_event_loop, importing, refuse_exits)
from graph.registry import Registry
from graph.spec import NodeSpec
from graph.v1 import spec_from_v1

log = logging.getLogger(__name__)

ModuleHook = Callable[[ModuleType, str, Registry], None]


@dataclass
class PackResult:
    name: str
    path: Path
    ok: bool
    error: str | None  # traceback text when the pack failed
    seconds: float
    web_directory: Path | None
    module: ModuleType | None
    nodes: list[str] = field(default_factory=list)  # node types this pack registered
    skipped: list[str] = field(default_factory=list)  # names refused (already registered, or unusable)
    # node type -> why its declaration failed last (INPUT_TYPES() raised or overran), kept up to date
    # by the node's guard while the server runs; such a node is missing from /object_info
    node_errors: dict[str, str] = field(default_factory=dict)
    abandoned: bool = False  # the import overran its limit and was left running in the background


# The pack whose import code runs in this context (for what packs register at import: routes).
_loading_pack: contextvars.ContextVar[str | None] = contextvars.ContextVar("loading_pack", default=None)
# Limits a host set for the loads it starts in this context (`limits_for_loads`).
_limits: contextvars.ContextVar[PackLimits | None] = contextvars.ContextVar("pack_limits", default=None)


def loading_pack() -> str | None:
    """The name of the pack being imported in the calling context, else None."""
    return _loading_pack.get()


@contextlib.contextmanager
def limits_for_loads(limits: PackLimits) -> Any:
    """`limits` for every `load_custom_nodes` in the block that is not given its own (for a host
    whose loads go through a layer that does not pass them on, web/bootstrap.py)."""
    token = _limits.set(limits)
    try:
        yield limits
    finally:
        _limits.reset(token)


def discover(dirs: Iterable[str | os.PathLike]) -> list[Path]:
    """The pack paths in `dirs`, in folder order then name order."""
    found: list[Path] = []
    for folder in dirs:
        folder = Path(folder)
        if not folder.is_dir():
            log.warning("custom nodes folder %s does not exist; skipped", folder)
            continue
        for entry in sorted(folder.iterdir(), key=lambda p: p.name):
            name = entry.name
            if name.startswith(".") or name == "__pycache__" or name.endswith(".disabled"):
                continue
            if (entry.is_file() and name.endswith(".py")) or entry.is_dir():
                # a folder without __init__.py is a pack that fails to import, as in ComfyUI
                found.append(entry)
    return found


def pack_name(path: Path) -> str:
    """`my_pack` for `my_pack.py`, the folder name for a package."""
    return path.stem if path.is_file() else path.name


def _module_name(path: Path) -> str:
    # ComfyUI's scheme: the file path without extension, or the folder path with "." -> "_x_".
    if path.is_file():
        return str(path.with_suffix(""))
    return str(path).replace(".", "_x_")


def load_custom_nodes(registry: Registry, dirs: Iterable[str | os.PathLike], *,
                      whitelist: Iterable[str] | None = None,
                      import_context: Callable[[], ContextManager[Any]] | None = None,
                      module_hooks: Sequence[ModuleHook] = (),
                      limits: PackLimits | None = None) -> list[PackResult]:
    """Import every pack in `dirs` and register its nodes; see the module docstring.

    `whitelist`: when given, only packs with these names load. `import_context()` is entered
    around each pack's import (the compat layer installs ComfyUI's import surface with it);
    each of `module_hooks(module, pack_name, registry)` runs after a successful import.
    `limits`: how long to wait for pack code (default: `limits_for_loads`' or `PackLimits()`).
    """
    limits = limits or _limits.get() or PackLimits()
    allowed = set(whitelist) if whitelist is not None else None
    results: list[PackResult] = []
    loop = caller_event_loop() if limits.import_timeout is not None else None  # what imports see as current
    with refuse_exits():
        for path in discover(dirs):
            name = pack_name(path)
            if allowed is not None and name not in allowed and path.name not in allowed:
                log.info("custom node pack %s is not in the whitelist; skipped", name)
                continue
            results.append(_load_one(registry, path, name, import_context, module_hooks, limits, loop))
    _log_times(results)
    return results


def load_custom_node(registry: Registry, path: str | os.PathLike, *,
                     import_context: Callable[[], ContextManager[Any]] | None = None,
                     module_hooks: Sequence[ModuleHook] = (), limits: PackLimits | None = None,
                     ignore: Iterable[str] = ()) -> PackResult:
    """Import one pack (a `.py` file or a package folder) and register its nodes, while the
    server runs (ComfyUI's `nodes.load_custom_node`: hot-reload packs re-import an edited pack
    with it). The pack's own node types registered before are replaced by the new classes
    (`Registry.replace_spec`), so the next prompt runs the new code; node types in `ignore`, a
    built-in's or another pack's stay as they are (logged)."""
    limits = limits or _limits.get() or PackLimits()
    path = Path(path)
    loop = caller_event_loop() if limits.import_timeout is not None else None
    with refuse_exits():
        return _load_one(registry, path, pack_name(path), import_context, module_hooks, limits, loop,
                         replace_own=True, ignore=frozenset(ignore))


def _load_one(registry: Registry, path: Path, name: str,
              import_context: Callable[[], ContextManager[Any]] | None,
              module_hooks: Sequence[ModuleHook], limits: PackLimits, loop: Any = None, *,
              replace_own: bool = False, ignore: frozenset[str] = frozenset()) -> PackResult:
    start = time.perf_counter()
    module_name = _module_name(path)
    result = PackResult(name, path, False, None, 0.0, None, None)
    view = RegistryView(registry, name)

    def import_pack() -> ModuleType:
        token = _loading_pack.set(name)
        try:
            with importing(name), (import_context() if import_context is not None else contextlib.nullcontext()):
                return _import(path, module_name)
        finally:
            _loading_pack.reset(token)

    def run_hooks() -> None:
        for hook in module_hooks:
            hook(result.module, name, view)  # type: ignore[arg-type] -- the registry, as far as hooks use it

    def finished_late(call: Any) -> None:
        outcome = f"failed with {type(call.error).__name__}: {call.error}" if call.error is not None else "succeeded"
        log.warning("the abandoned %s finished %.1f s after it started and %s; nothing it did after the limit "
                    "is used (restart the server to load the pack)", call.label, call.seconds, outcome)

    try:
        result.module = bounded(import_pack, limits.import_timeout, f"import of custom node pack {name}",
                                on_late=finished_late, loop=loop)
        _register(registry, result.module, name, result, limits, replace_own=replace_own, ignore=ignore)
        if module_hooks:
            bounded(run_hooks, limits.import_timeout, f"registration (comfy_entrypoint) of custom node pack {name}",
                    on_late=finished_late, loop=loop)
    except PackTimeoutError as ex:
        view.close()
        result.abandoned = True
        result.error = str(ex)
        log.error("Cannot import %s module for custom nodes: %s", path, result.error)
    except BaseException as ex:  # noqa: BLE001 -- a pack may raise anything, even SystemExit
        if isinstance(ex, KeyboardInterrupt):
            raise
        result.error = "".join(traceback.format_exception(type(ex), ex, ex.__traceback__))
        log.error("Cannot import %s module for custom nodes: %s: %s\n%s", path, type(ex).__name__, ex, result.error)
    else:
        result.ok = True
        result.web_directory = _web_directory(result.module, path)
    result.seconds = time.perf_counter() - start
    return result


def _import(path: Path, module_name: str) -> ModuleType:
    if path.is_dir() and not (path / "__init__.py").is_file():
        raise ImportError(f"{path} is a folder without __init__.py: not a pack (a pack is a .py file or a "
                          f"package); a single-file pack inside it goes in the custom_nodes folder itself")
    if path.is_file():
        spec = importlib.util.spec_from_file_location(module_name, path)
    else:
        spec = importlib.util.spec_from_file_location(module_name, path / "__init__.py",
                                                      submodule_search_locations=[str(path)])
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot build an import spec for {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def _register(registry: Registry, module: ModuleType, name: str, result: PackResult, limits: PackLimits, *,
              replace_own: bool = False, ignore: frozenset[str] = frozenset()) -> None:
    """Register the pack's V1 classes, appending to `result.nodes` / `.skipped` as it goes.

    A problem in one node's declaration never refuses the pack (ComfyUI's `nodes.py:
    load_custom_node` registers every class of `NODE_CLASS_MAPPINGS` without looking inside):
    a quirk ComfyUI accepts is registered as ComfyUI reads it and logged once (`NodeSpec.quirks`);
    a class that is not a node (not a class, no `INPUT_TYPES`) is skipped alone, and so
    is one whose `INPUT_TYPES()` overran `limits.call_timeout` while loading. Each node's later
    `INPUT_TYPES()` reads go through its `NodeCallGuard`.
    """
    nodes, skipped = result.nodes, result.skipped
    mappings = getattr(module, "NODE_CLASS_MAPPINGS", None) or {}
    display = getattr(module, "NODE_DISPLAY_NAME_MAPPINGS", None) or {}
    python_module = f"custom_nodes.{name}"
    for class_type, cls in mappings.items():
        if class_type in ignore:  # ComfyUI's load_custom_node skips these without a word
            skipped.append(class_type)
            continue
        guard = NodeCallGuard(name, str(class_type), limits.call_timeout, result.node_errors)
        try:
            taken = registry.find(class_type)
            own = (replace_own and taken is not None and taken.python_module == python_module
                   and not registry.is_builtin(class_type))
            if taken is not None and not own:
                raise DuplicateNodeTypeError(
                    f"node type {class_type!r} (from custom_nodes.{name}) is already registered by "
                    f"{'a built-in node' if registry.is_builtin(class_type) else 'another node'} "
                    f"(from {taken.python_module})")
            spec = bounded(lambda c=class_type, k=cls: spec_from_v1(c, k, display_name=display.get(c),
                                                                    python_module=python_module),
                           limits.call_timeout, f"INPUT_TYPES() of node {class_type!r}")
            spec = (registry.replace_spec if own else registry.add_spec)(_guarded(spec, guard))
        except PackTimeoutError as ex:
            result.node_errors[class_type] = str(ex)
            log.error("custom node pack %s: node %r is skipped: %s; the pack's other nodes load", name, class_type, ex)
            skipped.append(class_type)
            continue
        except DuplicateNodeTypeError as ex:
            log.warning("custom node pack %s: %s; the pack's node is ignored", name, ex)
            skipped.append(class_type)
            continue
        except Exception as ex:  # noqa: BLE001 -- whatever one declaration raises stays with that node
            log.error("custom node pack %s: node %r cannot be used and is skipped (%s: %s); the pack's other "
                      "nodes load", name, class_type, type(ex).__name__, ex)
            skipped.append(class_type)
            continue
        for quirk in spec.quirks:
            log.warning("custom node pack %s: node %r: %s", name, class_type, quirk)
            if quirk.startswith(_INPUT_TYPES_FAILED):
                result.node_errors[class_type] = quirk
        nodes.append(class_type)


_INPUT_TYPES_FAILED = "INPUT_TYPES() failed while loading"  # graph/v1.py's quirk for it


def _guarded(spec: NodeSpec, guard: NodeCallGuard) -> NodeSpec:
    """`spec` with its `INPUT_TYPES()` reads (per prompt, per /object_info) through `guard`."""
    read, render = spec.input_source, spec.render_info
    changes: dict[str, Any] = {}
    if read is not None:
        changes["input_source"] = lambda: guard("INPUT_TYPES()", read)
    if render is not None:
        changes["render_info"] = lambda env: guard("INPUT_TYPES()", lambda: render(env))
    return dataclasses.replace(spec, **changes) if changes else spec


def _web_directory(module: ModuleType, path: Path) -> Path | None:
    web = getattr(module, "WEB_DIRECTORY", None)
    if not web:
        return None
    base = path.parent if path.is_file() else path
    folder = (base / web).resolve()
    if not folder.is_dir():
        log.warning("custom node pack %s: WEB_DIRECTORY %s does not exist", pack_name(path), folder)
        return None
    return folder


def _log_times(results: list[PackResult]) -> None:
    if not results:
        return
    lines = ["Import times for custom nodes:"]
    for r in sorted(results, key=lambda r: r.seconds):
        lines.append(f"{r.seconds:6.1f} seconds{'' if r.ok else ' (IMPORT FAILED)'}: {r.path}")
    log.info("\n".join(lines))
