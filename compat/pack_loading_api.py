"""ComfyUI's pack-loading functions of `nodes` (nodes.py), for packs that load packs while the
server runs: `load_custom_node(module_path, ignore=set(), module_parent="custom_nodes")` (hot-
reload packs re-import an edited pack with it), `init_external_custom_nodes()` and
`init_extra_nodes(init_custom_nodes=True, init_api_nodes=True)` (scripts that build a server
themselves, e.g. ComfyUI-to-Python-Extension's command line), `init_builtin_extra_nodes()`
and `init_builtin_api_nodes()`.

All are coroutines, as in ComfyUI, and load through the session's pack loader
(`CompatSession.load_custom_node`, graph/packs.py): ComfyUI's import surface around the import,
V3 entrypoints, the pack's record in /custom_nodes/status and `nodes.NODE_CLASS_MAPPINGS`. A pack
loaded again replaces its own node types (the next prompt runs its new code; their cached
results are not reused). The built-in nodes, ComfyUI's `comfy_extras` and API nodes alike, are
registered when the engine starts, so the built-in loaders have nothing left to load and answer
ComfyUI's "no file failed" (an empty list)."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

from compat.active import active


async def load_custom_node(module_path: str, ignore: Iterable[str] = frozenset(),
                           module_parent: str = "custom_nodes") -> bool:
    """Import the pack at `module_path` (a `.py` file or a package folder) and register its
    nodes, except the node types in `ignore`; True when it loaded with nodes (V1 mappings or a
    V3 entrypoint), False when it failed (logged) or declares none, as ComfyUI answers.
    `module_parent`: the package the pack's nodes name as theirs (always `custom_nodes` here)."""
    result = active().load_custom_node(Path(module_path), ignore=ignore)
    module = result.module
    declares = module is not None and (getattr(module, "NODE_CLASS_MAPPINGS", None) is not None
                                       or callable(getattr(module, "comfy_entrypoint", None)))
    return bool(result.ok and declares)


async def init_external_custom_nodes() -> None:
    """Load every pack in the `custom_nodes` folders that is not loaded yet (ComfyUI skips
    `.disabled` ones and non-`.py` files, as graph/packs.py's discovery does)."""
    from graph.packs import discover

    session = active()
    loaded = {Path(pack.path).resolve() for pack in session.packs}
    registry = session.registry
    builtin = {name for name in registry if registry.is_builtin(name)}  # ComfyUI's base_node_names
    for path in discover(session.env.folders.paths("custom_nodes")):
        if path.resolve() not in loaded:
            await load_custom_node(str(path), ignore=builtin)


async def init_builtin_extra_nodes() -> list[str]:
    """ComfyUI's `comfy_extras` nodes: registered at start-up here; none failed."""
    return []


async def init_builtin_api_nodes() -> list[str]:
    """ComfyUI's API nodes: registered at start-up here; none failed."""
    return []


async def init_extra_nodes(init_custom_nodes: bool = True, init_api_nodes: bool = True) -> list[str]:
    """The built-in extras (already there), then the custom nodes not loaded yet; the names of
    the built-in extras files that failed (none)."""
    failed = await init_builtin_extra_nodes()
    if init_api_nodes:
        failed += await init_builtin_api_nodes()
    if init_custom_nodes:
        await init_external_custom_nodes()
    return failed
