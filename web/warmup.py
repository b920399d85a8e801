"""Keeping torch out of server start-up, and loading it in the background once the server listens.

Importing torch (and the comfy_core modules the built-in nodes run) takes seconds, and nothing
the server needs to print its URL and answer `/object_info` uses it: node modules import their
runtime inside the functions that run (nodes/_names.py holds the names their combos list).
Two pieces here finish the job:

- `DeferredMemoryManager` stands in `env.memory` for `comfy_core.memory.MemoryManager` (which
  imports torch) and builds it on first use; the patchers a loader hands to `track()` hold the
  real manager, so only the host's own reference goes through this object.
- `warm_up(env)` imports torch and every module the built-in nodes import lazily, then builds the
  memory manager; the server runs it in a worker thread after it starts listening
  (`web.app.start_server(..., warm_up=True)`), so the event loop keeps serving meanwhile.
  Only torch gates the queue (`runtime_ready`): a prompt needs it whatever it runs, while of the
  rest (150+ modules, most for families a given prompt never touches) it imports what it uses
  itself. The CLIP tokenizer, which nearly every first prompt needs, is built next, beside that
  prompt's checkpoint read; the rest (and every model family's modules, which a checkpoint's
  detection reads) is then imported only while no prompt runs or waits
  (`busy`), so the warm-up never competes with a prompt for the CPU or the interpreter.
"""
from __future__ import annotations

import ast
import gc
import importlib
import logging
import pkgutil
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterable

log = logging.getLogger(__name__)


class DeferredMemoryManager:
    """`comfy_core.memory.MemoryManager(cpu_only=...)`, built on first use (thread-safe).

    Attribute reads are forwarded to the real manager (`device`, `track`, `free_all`, ...);
    `recover` exists up front so the executor can be given it without building the manager.
    """

    def __init__(self, *, cpu_only: bool = False, factory: Callable[..., Any] | None = None) -> None:
        self.cpu_only = cpu_only
        self._factory = factory
        self._manager: Any = None
        self._lock = threading.Lock()

    @property
    def resolved(self) -> bool:
        """Whether the real manager exists yet (reading this builds nothing)."""
        return self._manager is not None

    def resolve(self) -> Any:
        """The real manager, built (importing torch) on the first call."""
        manager = self._manager
        if manager is None:
            with self._lock:
                if self._manager is None:
                    factory = self._factory
                    if factory is None:
                        from comfy_core.memory import MemoryManager as factory
                    self._manager = factory(cpu_only=self.cpu_only)
                manager = self._manager
        return manager

    def recover(self, exc: BaseException) -> bool:
        """The executor's out-of-memory hook (`MemoryManager.recover`)."""
        return self.resolve().recover(exc)

    def __getattr__(self, name: str) -> Any:
        # Only called for names this object lacks; private names are never forwarded, so a
        # half-built instance (copy, pickle) cannot recurse into resolve().
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.resolve(), name)

    def __repr__(self) -> str:
        state = repr(self._manager) if self._manager is not None else "not built yet"
        return f"DeferredMemoryManager(cpu_only={self.cpu_only}, {state})"


def lazy_imports(package: str) -> list[str]:
    """Absolute module names imported inside functions of `package`'s modules (found by reading
    their source, importing nothing), first-seen order: what the built-in nodes load when they
    run, so warming them up needs no list kept by hand."""
    root = importlib.import_module(package)
    names: dict[str, None] = {}
    for info in sorted(pkgutil.iter_modules(root.__path__), key=lambda m: m.name):
        source = Path(root.__path__[0]) / f"{info.name}.py"
        if not source.is_file():
            continue
        tree = ast.parse(source.read_text(encoding="utf-8"), filename=str(source))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for stmt in ast.walk(fn):
                if isinstance(stmt, ast.Import):
                    names.update((alias.name, None) for alias in stmt.names)
                elif isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and stmt.module:
                    names[stmt.module] = None
    return list(names)


def loaded_module(name: str) -> ModuleType | None:
    """The module `name` once its import has finished, else None; never imports anything.

    A module is in `sys.modules` from the moment its import starts, so a route that reads it
    while the warm-up thread (or a node's lazy import) is still running it sees a half-built
    module (`AttributeError: partially initialized module 'torch'`). Python's import system marks
    such a module with `__spec__._initializing` (importlib._bootstrap._load_unlocked) and makes
    other importers wait on it; readers that must not wait check the same mark here."""
    module = sys.modules.get(name)
    if module is None or getattr(getattr(module, "__spec__", None), "_initializing", False):
        return None
    return module


def use_deterministic_algorithms() -> None:
    """`--deterministic`: torch picks deterministic algorithms where it has them and warns where
    it has none (ComfyUI's comfy/model_management.py). A process setting, made by the host."""
    import torch

    torch.use_deterministic_algorithms(True, warn_only=True)


def warm_up(env: Any, modules: Iterable[str] | None = None, *, deterministic: bool = False,
            runtime_ready: Callable[[], None] | None = None, busy: Callable[[], bool] | None = None,
            idle_poll_s: float = 0.1, imported: threading.Event | None = None) -> float:
    """Import torch, call `runtime_ready()` (the queue may start), build the shared CLIP tokenizer,
    then import `modules` (default: every lazy import of the built-in nodes and of
    comfy_core.image) and build `env.memory` if it is deferred; returns the seconds it took. Each
    module, and the final collection, waits while `busy()` says a prompt runs or waits (checked
    every `idle_poll_s`).
    A module that fails to import is logged and skipped: the node that needs it reports the
    error when it runs.
    `deterministic`: switch torch to deterministic algorithms once it is imported.
    `imported`: set once torch and the tokenizer's packages are imported (or failed to), whatever
    happens; a pack load in the background waits for it before importing anything (see
    `DeferredPackLoad.run`: two threads must not import the same package at once)."""
    started = time.perf_counter()

    def when_idle() -> None:
        while busy is not None and busy():
            time.sleep(idle_poll_s)

    try:
        _import_quietly("torch")
        if deterministic and loaded_module("torch") is not None:
            use_deterministic_algorithms()
        log.info("torch loaded in the background in %.2f s; prompts can run", time.perf_counter() - started)
        if runtime_ready is not None:
            runtime_ready()
        # Not waiting for idle: nearly every first prompt loads a checkpoint with a CLIP, which needs this
        # tokenizer (~0.15 s once torch is in: it is built on the `tokenizers` library, not transformers);
        # built here it overlaps that prompt's checkpoint read rather than following it.
        _build_shared_tokenizer()
    finally:
        if imported is not None:
            imported.set()
    if modules is None:  # the nodes' own, and those of the image helpers they call (comfy_core.image)
        modules = [*lazy_imports("nodes"), *lazy_imports("comfy_core.image")]
    for name in modules:
        when_idle()
        _import_quietly(name)
    when_idle()
    _import_families()
    memory = getattr(env, "memory", None)
    if isinstance(memory, DeferredMemoryManager):
        memory.resolve()
    # Everything imported so far lives as long as the server: move it out of the collector's
    # reach, so full collections during prompts do not walk torch's hundreds of thousands of
    # objects (when idle: a running prompt's objects must stay collectable).
    when_idle()
    gc.collect()
    gc.freeze()
    seconds = time.perf_counter() - started
    log.info("runtime loaded in the background in %.2f s", seconds)
    return seconds


def _import_quietly(name: str) -> None:
    try:
        importlib.import_module(name)
    except Exception:  # noqa: BLE001 -- an optional package; its node fails with the real error
        log.debug("warm-up: cannot import %s", name, exc_info=True)


def _import_families() -> None:
    """Every model family's modules (comfy_core.families.default_registry imports ~270 of them,
    ~0.2 s): what the first checkpoint load's detection would otherwise import."""
    try:
        from comfy_core.families import default_registry

        default_registry()
    except Exception:  # noqa: BLE001 -- the loader that needs it reports the real error
        log.debug("warm-up: cannot import the model families", exc_info=True)


def _build_shared_tokenizer() -> None:
    """The CLIP BPE tokenizer every SD1 / SDXL / SD3 / Flux CLIP shares (deriving its vocabulary
    and building the tokenizer is ~1 s, paid once per process): built here rather than by the first
    checkpoint load that needs it."""
    try:
        from comfy_core.text_encoders.tokenizer import ClipTokenizer

        ClipTokenizer.shared_default()
    except Exception:  # noqa: BLE001 -- the loader that needs it reports the real error
        log.debug("warm-up: cannot build the CLIP tokenizer", exc_info=True)
