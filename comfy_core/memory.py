"""Device choice and memory management for patched models: load on use, offload least recently used.

`MemoryManager` is an ordinary object passed explicitly (the server keeps one in its environment
object); there is no process-wide instance. It follows the policy of ComfyUI's
comfy/model_management.py in a much smaller form:

- device choice: CUDA, else MPS, else CPU; `cpu_only` (the `--cpu` flag) forces CPU;
- a budget in bytes for models resident on the compute device (default: the device's total
  memory minus a reserve for activations; unlimited when computing on the offload device);
- `prepare(patcher)` before use: the patcher becomes most recently used and others that are not
  in use are offloaded, least recently used first, until it fits (`Patcher.applied()` calls it
  when the patcher has `memory` set);
- `free_all()` / `unload_all()` (POST /free): offload every model not in use and drop cached
  patched weights;
- `retry_on_oom(fn)`: on an out-of-memory error, unload everything and call `fn` once more.
"""
from __future__ import annotations

import gc
import logging
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

import torch

log = logging.getLogger(__name__)

T = TypeVar("T")
GiB = 1024 ** 3
DEFAULT_RESERVE = int(0.8 * GiB)  # activations and workspace, ComfyUI's minimum inference memory


class MemoryConfigError(RuntimeError):
    """A memory-management request that cannot be honoured (bad device, bad budget)."""


def choose_device(cpu_only: bool = False) -> torch.device:
    """The compute device: CUDA, else MPS, else CPU; always CPU when `cpu_only` (`--cpu`)."""
    if cpu_only:
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def device_total_memory(device: torch.device) -> int | None:
    """Total memory of `device` in bytes, or None where it is shared with the host (CPU, MPS)."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    return None


def is_out_of_memory(exc: BaseException) -> bool:
    """True for CUDA/MPS/CPU out-of-memory errors (typed where torch has a type, else by message)."""
    oom_type = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
    if oom_type is not None and isinstance(exc, oom_type):
        return True
    return isinstance(exc, (RuntimeError, MemoryError)) and (
        isinstance(exc, MemoryError) or "out of memory" in str(exc).lower())


@dataclass
class _Entry:
    module: "weakref.ReferenceType[torch.nn.Module]"
    patcher: "weakref.ReferenceType[Any]"
    name: str


class MemoryManager:
    """Which patched models sit on the compute device, and moving them off when over budget."""

    def __init__(self, device: torch.device | str | None = None, *, cpu_only: bool = False,
                 budget_bytes: int | None = None, offload_device: torch.device | str = "cpu",
                 reserve_bytes: int = DEFAULT_RESERVE) -> None:
        self.device = torch.device(device) if device is not None else choose_device(cpu_only)
        if cpu_only and self.device.type != "cpu":
            raise MemoryConfigError(f"cpu_only is set but the device given is {self.device}")
        self.offload_device = torch.device(offload_device)
        if budget_bytes is not None and budget_bytes < 0:
            raise MemoryConfigError(f"memory budget must be >= 0 bytes, got {budget_bytes}")
        if budget_bytes is None:
            total = device_total_memory(self.device)
            budget_bytes = None if total is None else max(0, total - reserve_bytes)
        self.budget_bytes = budget_bytes
        self._lock = threading.RLock()
        self._loaded: OrderedDict[int, _Entry] = OrderedDict()  # id(module) -> entry, LRU first

    # --- tracking ---

    def track(self, patcher: Any) -> Any:
        """Let `patcher` (and its future clones) report use to this manager; returns it."""
        patcher.memory = self
        patcher.load_device = self.device
        patcher.offload_device = self.offload_device
        return patcher

    def loaded_models(self) -> list[Any]:
        """Patchers whose modules are on the compute device, least recently used first."""
        with self._lock:
            self._prune()
            return [p for e in self._loaded.values() if (p := e.patcher()) is not None]

    def loaded_bytes(self) -> int:
        with self._lock:
            self._prune()
            return sum(_resident_bytes(p) for e in self._loaded.values() if (p := e.patcher()) is not None)

    def _prune(self) -> None:
        for key in [k for k, e in self._loaded.items() if e.module() is None or e.patcher() is None]:
            del self._loaded[key]

    # --- loading and offloading ---

    def prepare(self, patcher: Any, device: torch.device | None = None) -> torch.device:
        """Make room for `patcher` on the compute device and mark it most recently used.

        Returns the device it should run on. Models in use (inside `applied()`) are never moved.
        """
        device = torch.device(device) if device is not None else self.device
        with self._lock:
            self._prune()
            key = id(patcher.model)
            entry = self._loaded.pop(key, None)
            if entry is None or entry.module() is not patcher.model:
                entry = _Entry(weakref.ref(patcher.model), weakref.ref(patcher), type(patcher.model).__name__)
            else:
                entry.patcher = weakref.ref(patcher)
            self._loaded[key] = entry
            # Computing where models rest: nothing to move; still tracked for their weight caches.
            if self.budget_bytes is not None and device != self.offload_device:
                self._fit(self.budget_bytes - patcher.model_size(), keep=key)
        return device

    def _fit(self, allowed: int, keep: int | None = None) -> int:
        """Offload LRU models (not `keep`, not in use) until the others fit in `allowed` bytes."""
        freed = 0
        for key, entry in list(self._loaded.items()):
            others = sum(_resident_bytes(e.patcher()) for k, e in self._loaded.items()
                         if k != keep and e.patcher() is not None)
            if others <= allowed:
                break
            patcher = entry.patcher()
            if key == keep or patcher is None or patcher.in_use:
                continue
            freed += self._offload(key, patcher)
        return freed

    def _offload(self, key: int, patcher: Any) -> int:
        size = _resident_bytes(patcher)
        patcher.drop_weight_cache()
        if patcher.current_device() != self.offload_device:
            patcher.model.to(self.offload_device)
        self._loaded.pop(key, None)
        log.info("offloaded %s (%.1f MiB) to %s", type(patcher.model).__name__, size / 2**20, self.offload_device)
        return size

    def offload(self, patcher: Any) -> int:
        """Move one model off the compute device (unless in use); returns bytes freed."""
        with self._lock:
            if patcher.in_use:
                return 0
            return self._offload(id(patcher.model), patcher)

    def free_all(self) -> int:
        """Offload every model not in use and drop cached patched weights (POST /free)."""
        with self._lock:
            self._prune()
            freed = 0
            for key, entry in list(self._loaded.items()):
                patcher = entry.patcher()
                if patcher is not None and not patcher.in_use:
                    freed += self._offload(key, patcher)
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        return freed

    unload_all = free_all

    def recover(self, exc: BaseException) -> bool:
        """The executor's retry hook: on out-of-memory, unload every model and say "retry".

        Returns True after freeing when `exc` is an out-of-memory error (the caller then runs
        the failed call once more), False for any other error, which is left untouched.
        """
        if not is_out_of_memory(exc):
            return False
        log.warning("out of memory (%s); unloading models before the node is retried", exc)
        self.free_all()
        return True

    def retry_on_oom(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Call `fn`; on out-of-memory, unload every model and call it once more (then let it raise)."""
        try:
            return fn(*args, **kwargs)
        except BaseException as exc:
            if not is_out_of_memory(exc):
                raise
            log.warning("out of memory (%s); unloading models and retrying once", exc)
        self.free_all()
        return fn(*args, **kwargs)


def _resident_bytes(patcher: Any) -> int:
    """Bytes a patcher's module holds on its current device, cached patched weights included."""
    if patcher is None:
        return 0
    return patcher.model_size() + patcher.weight_cache_bytes()
