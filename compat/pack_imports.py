"""Modules a pack's import drops from `sys.modules` that are not the pack's own come back.

Some packs clean up after their own import by deleting every module that appeared in
`sys.modules` while they imported (UltimateSDUpscale's `__init__.py`: "Remove any new modules"),
so that their bundled `modules` / `utils` packages do not shadow other packs'. In ComfyUI that
only removes the pack's own modules and the few libraries nothing imported before, because
ComfyUI's start-up has already imported torch, numpy, PIL and every `comfy.*` module. Our
start-up is torch-free and imports the runtime on first use, so the same clean-up would drop
torch (a C extension that cannot be imported twice in one process: the next `import torch`
fails with "module functions cannot set METH_CLASS or METH_STATIC") and our own runtime modules
(a second copy of a module means a second copy of its classes, which `isinstance` rejects).

`keep_shared_modules(pack_roots)` wraps a pack import: afterwards, every module object still
alive whose name is missing from `sys.modules`, that was not already out of `sys.modules` before
the import, and whose file is not under one of the pack folders, is put back under its name.
What the pack dropped of its own files stays dropped, as in ComfyUI.

Finding them costs little: the modules that were in `sys.modules` are one dict copy taken before
the import, and the ones made during it are found among the objects made during it only, by
freezing the collector's objects for the import's duration (`gc.freeze()`: `gc.get_objects()`
then lists only what was made since; `gc.unfreeze()` afterwards hands the rest back to the
collector as it was). Scanning every object of the process before and after each pack, as the
first version did, took 0.2-0.5 s per pack once torch was loaded: most of the start-up time with
tens of packs (issue 33, bench/pack_startup.py). Where that cannot be used (another import is
being watched at the same time, e.g. one abandoned past its time limit, or the process froze
objects itself) the import is watched with whole-heap scans as before.
"""
from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Iterable, Iterator


def _detached_modules() -> list[ModuleType]:
    """Live module objects whose name does not map to them in `sys.modules`."""
    modules = sys.modules
    found = []
    for obj in gc.get_objects():
        if issubclass(type(obj), ModuleType):  # type(): lazy objects warn on `__class__` reads
            name = getattr(obj, "__name__", None)
            if isinstance(name, str) and name not in modules:
                found.append(obj)
    return found


def _imported_as(module: ModuleType) -> bool:
    """Whether `module` was made by the import system under its own name (not a pack's
    `types.ModuleType("x")` scratch object, which never belonged in `sys.modules`)."""
    spec = getattr(module, "__spec__", None)
    return spec is not None and getattr(spec, "name", None) == module.__name__


def _under(path: str | None, roots: list[str]) -> bool:
    if not path:
        return False
    real = os.path.realpath(path)
    return any(real == root or real.startswith(root + os.sep) for root in roots)


def _pack_folders(pack_roots: Iterable[str | os.PathLike]) -> list[str]:
    """The custom-node folders and, resolved, each pack in them (packs are often linked in)."""
    folders = []
    for root in pack_roots:
        root = Path(root)
        folders.append(os.path.realpath(root))
        if root.is_dir():
            folders.extend(os.path.realpath(child) for child in root.iterdir())
    return folders


_watching = threading.Lock()  # held while an import is watched with frozen objects


@contextlib.contextmanager
def keep_shared_modules(pack_roots: Iterable[str | os.PathLike]) -> Iterator[None]:
    """Around one pack import: restore the modules it dropped that are not under `pack_roots`."""
    roots = _pack_folders(pack_roots)
    before = dict(sys.modules)  # held for the import's duration: these come back if dropped
    frozen = gc.get_freeze_count() == 0 and _watching.acquire(blocking=False)
    if frozen:
        gc.freeze()  # gc.get_objects() lists only objects made from here on
        skip: set[int] = set()
    else:
        # held (not only their ids) for the import's duration, so no id is reused by a new module
        already_detached = _detached_modules()
        skip = {id(m) for m in already_detached}
    try:
        yield
    finally:
        try:
            made = _detached_modules()  # with frozen objects: only those made during the import
        finally:
            if frozen:
                gc.unfreeze()
                _watching.release()
        dropped = [m for name, m in before.items() if name not in sys.modules
                   and issubclass(type(m), ModuleType) and getattr(m, "__name__", None) == name]
        seen: set[int] = set()
        for module in [*made, *dropped]:
            name = module.__name__
            if id(module) in skip or id(module) in seen or name in sys.modules or not _imported_as(module):
                continue
            seen.add(id(module))
            places = [getattr(module, "__file__", None), *list(getattr(module, "__path__", None) or [])]
            if any(_under(place, roots) for place in places):
                continue  # the pack's own module, which it meant to drop
            sys.modules[name] = module
