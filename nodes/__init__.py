"""Built-in nodes, one theme per file. Thin: typed sockets that call comfy_core.

Nothing registers itself at import time: `register_builtin_nodes(registry)` imports every module
of this package and adds each module-level function declared with `graph.native.node`.
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Callable, Iterator


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


def __getattr__(name: str):
    # ComfyUI's `nodes` module names for packs (MAX_RESOLUTION, NODE_CLASS_MAPPINGS, KSampler, ...):
    # see nodes/_comfy_facade.py.
    if name.startswith("_"):  # submodules being imported, dunder probes
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return importlib.import_module("nodes._comfy_facade").attribute(name)
