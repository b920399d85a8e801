"""Names a ComfyUI module has because it imported them from another ComfyUI module.

`comfy/samplers.py` does `from comfy.k_diffusion import sampling as k_diffusion_sampling`, so packs
read `comfy.samplers.k_diffusion_sampling`; `comfy/sd.py` imports `model_detection`, `nodes.py`
imports `args` from `comfy.cli_args`, and so on. comfy_reexports.json lists them, per module, as
`{name: "comfy.source.module:attribute"}` (recorded from ComfyUI 0.3.64's files by
scripts/comfy_surface.py; names only). Every surface module reads them through
`FacadeModule.__getattr__` (compat/facade.py): a name the module lacks itself resolves, on first
read, to the source module's attribute here (imported through the import hook), and is then
cached in the module's namespace, as Python's `from x import y` binds a value once. Assigning it
changes only that module's name, as in ComfyUI.
"""
from __future__ import annotations

import functools
import importlib
import json
import threading
from pathlib import Path
from typing import Any

REEXPORTS_FILE = Path(__file__).resolve().parent / "comfy_reexports.json"
_resolving = threading.local()


@functools.lru_cache(maxsize=1)
def reexports() -> dict[str, dict[str, str]]:
    return json.loads(REEXPORTS_FILE.read_text(encoding="utf-8"))


def source_of(module: str, name: str) -> str | None:
    """`"package.module:attribute"` that ComfyUI's `module` imported `name` from, or None."""
    return reexports().get(module, {}).get(name)


def resolve(module: str, name: str) -> Any:
    """The value of `module.name` when it is a re-export; AttributeError when it is not one or
    its source does not exist here (the gap then names the source)."""
    source = source_of(module, name)
    if source is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    key = (module, name)
    active: set = getattr(_resolving, "keys", None) or set()
    if key in active:  # a cycle of re-exports: none of them exists
        raise AttributeError(f"module {module!r} has no attribute {name!r} (its import from {source} is circular)")
    active.add(key)
    _resolving.keys = active
    try:
        home, _, attribute = source.partition(":")
        try:
            source_module = importlib.import_module(home)
        except ImportError as exc:
            raise AttributeError(f"module {module!r} has no attribute {name!r}: ComfyUI imports it from {home}, "
                                 f"which this engine does not provide ({exc})") from None
        try:
            return getattr(source_module, attribute)
        except AttributeError:
            raise AttributeError(f"module {module!r} has no attribute {name!r}: ComfyUI imports it from "
                                 f"{source}, which this engine does not provide") from None
    finally:
        active.discard(key)
