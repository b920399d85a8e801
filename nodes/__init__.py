"""Built-in nodes, one theme per file. Thin: typed sockets that call comfy_core.

Nothing registers itself at import time: `register_builtin_nodes(registry)` imports every module
of this package and adds each module-level function declared with `graph.native.node`.
"""
from __future__ import annotations

import importlib
import pkgutil
import sys
from typing import Any, Callable, Iterator


def builtin_node_functions() -> Iterator[Callable]:
    """Every `@node` function of every module in this package, in a stable order."""
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_") or info.name == "environment":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for value in vars(module).values():
            if callable(value) and hasattr(value, "__node_spec__") and getattr(value, "__module__", None) == module.__name__:
                yield value


def register_builtin_nodes(registry) -> None:
    """Add the built-in nodes to a `graph.registry.Registry`."""
    for fn in builtin_node_functions():
        registry.add_native(fn, builtin=True)


def __getattr__(name: str) -> Any:
    # ComfyUI's `nodes` module names for packs (MAX_RESOLUTION, NODE_CLASS_MAPPINGS, KSampler, ...)
    # belong to ComfyUI's import surface, the compat layer, which a host installs as an import
    # hook. This package never imports compat: it asks the installed hook, the meta-path finder
    # that answers `comfy_module_attribute` (compat/finder.py, compat/node_facades.py).
    if name.startswith("_"):  # submodules being imported, dunder probes
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    for finder in sys.meta_path:
        answer = getattr(finder, "comfy_module_attribute", None)
        if answer is not None:
            return answer(__name__, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r} (ComfyUI's names on `nodes` exist "
                         f"once a host has installed the compat layer: compat.install)")
