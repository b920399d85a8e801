"""Loading custom node packs (ComfyUI's V1 module contract, reference §4.2).

Each `custom_nodes` folder is listed in name order; an entry is a pack when it is a `.py` file or
a folder with `__init__.py`. Hidden names, `__pycache__` and names ending in `.disabled` are
skipped. A pack is imported under a module name derived from its path (as ComfyUI does, so
hyphenated folder names work and relative imports inside packages resolve), then its
`NODE_CLASS_MAPPINGS` (with `NODE_DISPLAY_NAME_MAPPINGS`) are registered and `WEB_DIRECTORY`
is resolved. A pack that raises while importing is reported (name, traceback) and skipped;
every other pack still loads. A node name that is already registered (a built-in, or a name an
earlier pack took) is not overridden, and a class that cannot be run (no `FUNCTION`, ...) is not
registered: both are logged and listed in `PackResult.skipped`, and the pack's other nodes load.
Declaration quirks that ComfyUI accepts (an input named under both `required` and `optional`)
are registered the way ComfyUI reads them, with one warning each.
Import times are logged in one table at the end, like ComfyUI's start-up log.

Where the folders come from (the `custom_nodes` folder, `custom_nodes:` entries of
`extra_model_paths.yaml` via `comfy_core.folders.load_extra_model_paths`) is the host's choice.
"""
from __future__ import annotations

import contextlib
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
from graph.registry import Registry

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
            if entry.is_file() and name.endswith(".py"):
                found.append(entry)
            elif entry.is_dir() and (entry / "__init__.py").is_file():
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
                      module_hooks: Sequence[ModuleHook] = ()) -> list[PackResult]:
    """Import every pack in `dirs` and register its nodes; see the module docstring.

    `whitelist`: when given, only packs with these names load. `import_context()` is entered
    around each pack's import (the compat layer installs ComfyUI's import surface with it);
    each of `module_hooks(module, pack_name, registry)` runs after a successful import.
    """
    allowed = set(whitelist) if whitelist is not None else None
    results: list[PackResult] = []
    for path in discover(dirs):
        name = pack_name(path)
        if allowed is not None and name not in allowed and path.name not in allowed:
            log.info("custom node pack %s is not in the whitelist; skipped", name)
            continue
        results.append(_load_one(registry, path, name, import_context, module_hooks))
    _log_times(results)
    return results


def _load_one(registry: Registry, path: Path, name: str,
              import_context: Callable[[], ContextManager[Any]] | None,
              module_hooks: Sequence[ModuleHook]) -> PackResult:
    start = time.perf_counter()
    module_name = _module_name(path)
    module: ModuleType | None = None
    nodes: list[str] = []
    skipped: list[str] = []
    try:
        with (import_context() if import_context is not None else contextlib.nullcontext()):
            module = _import(path, module_name)
        _register(registry, module, name, nodes, skipped)
        for hook in module_hooks:
            hook(module, name, registry)
    except BaseException as ex:  # noqa: BLE001 -- a pack may raise anything, even SystemExit
        if isinstance(ex, KeyboardInterrupt):
            raise
        error = traceback.format_exc()
        log.error("Cannot import %s module for custom nodes: %s\n%s", path, ex, error)
        return PackResult(name, path, False, error, time.perf_counter() - start, None, module, nodes, skipped)
    return PackResult(name, path, True, None, time.perf_counter() - start, _web_directory(module, path),
                      module, nodes, skipped)


def _import(path: Path, module_name: str) -> ModuleType:
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


def _register(registry: Registry, module: ModuleType, name: str, nodes: list[str], skipped: list[str]) -> None:
    """Register the pack's V1 classes, appending to `nodes` / `skipped` as it goes.

    A problem in one node's declaration never refuses the pack (ComfyUI's `nodes.py:
    load_custom_node` registers every class of `NODE_CLASS_MAPPINGS` without looking inside):
    a quirk ComfyUI accepts is registered as ComfyUI reads it and logged once (`NodeSpec.quirks`);
    a class we cannot run at all (not a class, no usable `FUNCTION`, ...) is skipped alone.
    """
    mappings = getattr(module, "NODE_CLASS_MAPPINGS", None) or {}
    display = getattr(module, "NODE_DISPLAY_NAME_MAPPINGS", None) or {}
    for class_type, cls in mappings.items():
        try:
            spec = registry.add_v1(class_type, cls, display_name=display.get(class_type),
                                   python_module=f"custom_nodes.{name}")
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
        nodes.append(class_type)


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
