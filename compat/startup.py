"""Running packs' `prestartup_script.py` files before any pack is imported (ComfyUI's main.py).

Each pack folder's `prestartup_script.py` runs once, in folder then name order (packs that are
disabled, `.disabled` or not whitelisted are skipped), with its own globals; a script that
raises is logged ("PRESTARTUP FAILED") and the others still run. `sys.exit()`, `os._exit()` and
`os.abort()` in a script fail that script only (graph/pack_isolation.py `refuse_exits`). Scripts
run in the caller's thread without a time limit: ComfyUI-Manager's installs packages there, which
may take as long as it takes, and an abandoned install would race the packs' imports.
"""
from __future__ import annotations

import logging
import runpy
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

log = logging.getLogger(__name__)

SCRIPT = "prestartup_script.py"


@dataclass
class PrestartupResult:
    name: str
    path: Path
    ok: bool
    error: str | None
    seconds: float


def run_prestartup_scripts(dirs: Iterable[Path], *, whitelist: Iterable[str] | None = None
                           ) -> list[PrestartupResult]:
    from graph.pack_isolation import refuse_exits

    with refuse_exits():
        results = _run_scripts(dirs, whitelist)
    if results:
        lines = ["Prestartup times for custom nodes:"]
        for r in results:
            lines.append(f"{r.seconds:6.1f} seconds{'' if r.ok else ' (PRESTARTUP FAILED)'}: {r.path.parent}")
        log.info("\n".join(lines))
    return results


def _run_scripts(dirs: Iterable[Path], whitelist: Iterable[str] | None) -> list[PrestartupResult]:
    from graph.pack_isolation import importing
    from graph.packs import discover, pack_name

    allowed = set(whitelist) if whitelist is not None else None
    results: list[PrestartupResult] = []
    for pack in discover(dirs):
        script = pack / SCRIPT
        if not pack.is_dir() or not script.is_file():
            continue
        name = pack_name(pack)
        if allowed is not None and name not in allowed:
            continue
        started = time.perf_counter()
        try:
            with importing(name, "prestartup script"):
                runpy.run_path(str(script), run_name=f"{name}.prestartup_script")
        except BaseException as exc:  # noqa: BLE001 -- a script may raise anything, even SystemExit
            if isinstance(exc, KeyboardInterrupt):
                raise
            error = traceback.format_exc()
            log.error("Failed to execute startup-script: %s\n%s", script, error)
            results.append(PrestartupResult(name, script, False, error, time.perf_counter() - started))
            continue
        results.append(PrestartupResult(name, script, True, None, time.perf_counter() - started))
    return results


# What ComfyUI's main.py has imported when it starts loading packs (its nodes.py imports the rest
# of this list): packs read some of them straight from `sys.modules` (ComfyUI-nunchaku's
# `sys.modules["folder_paths"]`) or use a submodule those imports bring in without importing it
# (Long-CLIP's `import packaging` then `packaging.version`, which transformers imports there).
# Our facades of these are light (no torch), so importing them costs milliseconds.
STARTUP_MODULES = ("folder_paths", "nodes", "execution", "server", "comfy", "comfy.utils", "comfy.model_management",
                   "comfy.samplers", "comfy.sample", "comfy.sd", "latent_preview", "node_helpers",
                   "packaging.version")


def import_startup_modules() -> None:
    """Import `STARTUP_MODULES` (through the active session's import hook); one that fails to
    import is logged, never fatal."""
    import importlib

    for name in STARTUP_MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 -- a missing optional library must not stop the packs
            log.warning("could not import %s before the packs", name, exc_info=True)


def expose_custom_nodes_package(dirs: Iterable[Path]) -> None:
    """Make every custom-node folder a place of the `custom_nodes` package, as ComfyUI's folder
    is: packs import themselves and each other as `custom_nodes.<pack>` (SaveImageWithMetaData
    its extension modules, Anyline `custom_nodes.comfyui_controlnet_aux`). ComfyUI gets that from
    its root folder being on `sys.path`; here the folders may be anywhere (`--base-directory`), so
    they are added to the package's `__path__` (made a package of its own when no `custom_nodes`
    folder is importable)."""
    import importlib
    import sys
    import types

    try:
        package = importlib.import_module("custom_nodes")
    except ImportError:
        package = sys.modules["custom_nodes"] = types.ModuleType("custom_nodes")
        package.__path__ = []
    paths = [str(p) for p in getattr(package, "__path__", [])]
    for folder in dirs:
        folder = str(Path(folder).resolve())
        if folder not in paths:
            paths.append(folder)
    package.__path__ = paths
