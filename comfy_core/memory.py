"""Device choice and memory management for patched models: load on use, offload least recently used.

`MemoryManager` is an ordinary object passed explicitly (the server keeps one in its environment
object); there is no process-wide instance. It follows the policy of ComfyUI's
comfy/model_management.py in a much smaller form:

- device choice: CUDA, else MPS, else CPU; `cpu_only` (the `--cpu` flag) forces CPU;
- a budget in bytes for models resident on the compute device (default: the device's total
  memory minus ComfyUI's reserve, 0.8 GiB for activations plus 400 MiB or `--reserve-vram`;
  unlimited when computing on the offload device);
- `prepare(patcher)` before use: the patcher becomes most recently used and others that are not
  in use are offloaded, least recently used first, until it fits (`Patcher.applied()` calls it
  when the patcher has `memory` set);
- `free_all()` / `unload_all()` (POST /free): offload every model not in use and drop cached
  patched weights;
- `retry_on_oom(fn)`: on an out-of-memory error, unload everything and call `fn` once more.

VRAM modes (`comfy_core.memory_plan.VramMode`, from ComfyUI's flags by `MemoryManager.from_flags`):
`gpu_only` keeps every model (text encoders and VAE too) on the GPU, never offloading; `highvram`
loads models whole and offloads only to make room; `normalvram` (the GPU default) and `lowvram`
load a model that does not fit the room left in part (ComfyUI's automatic lowvram): as many whole
modules as fit stay on the GPU, the others are streamed per forward from (pinned) host memory by
hooks the patcher carries while applied (`comfy_core.memory_stream`); `lowvram` also runs the text
encoders on the CPU; `novram` streams every weight. After an out-of-memory error the manager
drops to the next lower mode (`memory_plan.fallback_mode`) for the rest of its life, with one
log line; `reset_mode()` goes back.
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

from comfy_core.memory_plan import (MIN_PARTIAL_WEIGHTS, LoadPlan, VramMode, fallback_mode, mode_from_flags,
                                    plan_partial_load, weights_budget)
from comfy_core.memory_plan import reserve_bytes as comfy_reserve

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


def device_free_memory(device: torch.device) -> int | None:
    """Bytes free on a CUDA device now, counting what torch's allocator holds unused (ComfyUI's
    `get_free_memory`); None for devices sharing the host's memory."""
    if device.type != "cuda":
        return None
    free, _total = torch.cuda.mem_get_info(device)
    return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))


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
                 reserve_bytes: int | None = None, mode: VramMode | str | None = None,
                 free_memory: Callable[[torch.device], int | None] | None = None,
                 partial_floor: int = MIN_PARTIAL_WEIGHTS, pin_memory: bool | None = None,
                 stream_copy: Callable[[torch.Tensor, torch.device], torch.Tensor] | None = None) -> None:
        """`reserve_bytes`: device memory kept free (None: ComfyUI's 0.8 GiB minimum inference
        memory plus its 400 MiB extra reserve). `mode`: a `VramMode` (None: `normalvram` on CUDA,
        else the device kind's: `disabled` on the CPU, `shared` on MPS). `free_memory(device)`:
        bytes free there now, or None (default: CUDA's own count); a model is loaded in part when
        it does not fit. `partial_floor`: the least a partial load keeps on the device (ComfyUI's
        128 MiB). `pin_memory`: pin streamed modules' host weights (default: where CUDA is).
        `stream_copy(tensor, device)`: how a streamed weight is copied (default
        `tensor.to(device, non_blocking=pin_memory)`)."""
        self.device = torch.device(device) if device is not None else choose_device(cpu_only)
        if cpu_only and self.device.type != "cpu":
            raise MemoryConfigError(f"cpu_only is set but the device given is {self.device}")
        if mode is None:
            mode = mode_from_flags(self.device.type)
        try:
            self.configured_mode = VramMode.of(mode)
        except ValueError as exc:
            raise MemoryConfigError(str(exc)) from None
        self.mode = self.configured_mode
        # --gpu-only: nothing leaves the GPU (ComfyUI's offload devices are the GPU then).
        self.offload_device = self.device if self.mode == VramMode.GPU_ONLY else torch.device(offload_device)
        if budget_bytes is not None and budget_bytes < 0:
            raise MemoryConfigError(f"memory budget must be >= 0 bytes, got {budget_bytes}")
        self.reserve_bytes = comfy_reserve() if reserve_bytes is None else reserve_bytes
        if budget_bytes is None:
            total = device_total_memory(self.device)
            budget_bytes = None if total is None else max(0, total - self.reserve_bytes)
        self.budget_bytes = budget_bytes
        self._free_memory = free_memory if free_memory is not None else device_free_memory
        self.partial_floor = partial_floor
        self.pin_memory = (self.device.type == "cuda" and torch.cuda.is_available()) if pin_memory is None \
            else pin_memory
        self.stream_copy = stream_copy
        self._lock = threading.RLock()
        self._loaded: OrderedDict[int, _Entry] = OrderedDict()  # id(module) -> entry, LRU first
        self._plans: dict[int, LoadPlan] = {}  # id(module) -> its partial-load plan (absent: whole)
        self._split: set[int] = set()  # modules placed by a plan at their last application
        self.streamers: dict[int, Any] = {}  # id(module) -> the WeightStreamer of its last partial load

    @classmethod
    def from_flags(cls, *, cpu_only: bool = False, gpu_only: bool = False, highvram: bool = False,
                   normalvram: bool = False, lowvram: bool = False, novram: bool = False,
                   reserve_vram_gb: float | None = None, device: torch.device | str | None = None,
                   **kwargs: Any) -> "MemoryManager":
        """The manager for ComfyUI's memory flags (`--cpu --gpu-only --highvram --normalvram
        --lowvram --novram --reserve-vram GB`), with ComfyUI's precedence and reserve."""
        device = torch.device(device) if device is not None else choose_device(cpu_only)
        mode = mode_from_flags(device.type, gpu_only=gpu_only, highvram=highvram, normalvram=normalvram,
                               lowvram=lowvram, novram=novram)
        manager = cls(device, cpu_only=cpu_only, mode=mode, reserve_bytes=comfy_reserve(reserve_vram_gb), **kwargs)
        log.info("memory: %s on %s, weights budget %s", mode.value, device,
                 "unlimited" if manager.budget_bytes is None else f"{manager.budget_bytes / 2**20:.0f} MiB")
        return manager

    def reset_mode(self) -> None:
        """Back to the configured mode after an out-of-memory fallback."""
        self.mode = self.configured_mode

    # --- tracking ---

    def track(self, patcher: Any) -> Any:
        """Let `patcher` (and its future clones) report use to this manager; returns it.

        Text encoders (a `ClipPatcher`) compute on the CPU in lowvram and novram, as ComfyUI's
        `text_encoder_device()`."""
        patcher.memory = self
        patcher.load_device = self.offload_device if self._on_host(patcher) else self.device
        patcher.offload_device = self.offload_device
        return patcher

    def _on_host(self, patcher: Any) -> bool:
        return self.configured_mode.text_encoders_on_cpu and getattr(patcher, "is_text_encoder", False)

    def loaded_models(self) -> list[Any]:
        """Patchers whose modules are on the compute device, least recently used first."""
        with self._lock:
            self._prune()
            return [p for e in self._loaded.values() if (p := e.patcher()) is not None]

    def loaded_bytes(self) -> int:
        with self._lock:
            self._prune()
            return sum(_resident_bytes(p, self) for e in self._loaded.values() if (p := e.patcher()) is not None)

    def _prune(self) -> None:
        for key in [k for k, e in self._loaded.items() if e.module() is None or e.patcher() is None]:
            del self._loaded[key]

    # --- loading and offloading ---

    def prepare(self, patcher: Any, device: torch.device | None = None) -> torch.device:
        """Make room for `patcher` on the compute device and mark it most recently used.

        Returns the device it should run on (default: its `load_device`). Models in use (inside
        `applied()`) are never moved. A model that does not fit the room left gets a partial-load
        plan in the partial modes (see `plan_for`), which its next application follows."""
        if device is not None:
            device = torch.device(device)
        else:
            device = getattr(patcher, "load_device", None) or self.device
            device = torch.device(device)
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
            if device == self.offload_device:
                self._plans.pop(key, None)
                return device
            size = patcher.model_size()
            if self.budget_bytes is not None and self.mode != VramMode.GPU_ONLY:
                self._fit(self.budget_bytes - size, keep=key)
            if not patcher.in_use:  # a model running keeps its placement
                self._plan(patcher, key, device, size)
        return device

    def _room(self, patcher: Any, key: int, device: torch.device) -> int | None:
        """Bytes free for this model's weights: the budget less what other models hold, and no
        more than the device has free now (its own resident weights counted as free)."""
        room = None
        if self.budget_bytes is not None:
            others = sum(_resident_bytes(e.patcher(), self) for k, e in self._loaded.items()
                         if k != key and e.patcher() is not None)
            room = self.budget_bytes - others
        free = self._free_memory(device)
        if free is not None:
            free = free + self.loaded_weight_bytes(patcher, whole_if_loaded=True) - self.reserve_bytes
            room = free if room is None else min(room, free)
        return None if room is None else max(0, room)

    def _plan(self, patcher: Any, key: int, device: torch.device, size: int) -> None:
        from comfy_core.memory_stream import module_costs

        if self.mode.full_load:
            self._plans.pop(key, None)
            return
        budget = weights_budget(self.mode, size, self._room(patcher, key, device), floor=self.partial_floor)
        plan = None if budget is None else plan_partial_load(module_costs(patcher.model), budget)
        if plan is None or plan.full:
            if self._plans.pop(key, None) is not None:
                log.info("%s fits: loaded whole", type(patcher.model).__name__)
            return
        if self._plans.get(key) != plan:
            log.info("loaded partially: %s, %.1f of %.1f MiB on %s, %d modules streamed per forward (%s)",
                     type(patcher.model).__name__, plan.resident_bytes / 2**20, plan.total_bytes / 2**20,
                     device, len(plan.streamed), self.mode.value)
        self._plans[key] = plan

    def plan_for(self, patcher: Any) -> LoadPlan | None:
        """The partial-load plan the patcher's model follows, None when it is loaded whole."""
        return self._plans.get(id(patcher.model))

    def place(self, patcher: Any, device: torch.device, on_release: Callable[[Callable[[], None]], None]) -> bool:
        """Called by `Patcher.applied()` before patches go on: put the model's modules where its
        plan says and install the streaming hooks (removed through `on_release` when the
        application ends). False: no plan, the patcher moves the model whole itself."""
        from comfy_core.memory_stream import WeightStreamer, place

        key = id(patcher.model)
        plan = self._plans.get(key) if device != self.offload_device else None
        if plan is None:
            if key in self._split:  # was split at its last use: every module goes now
                self._split.discard(key)
                self.streamers.pop(key, None)
                patcher.model.to(device)
                return True
            return False
        place(patcher.model, plan, device, self.offload_device, pin=self.pin_memory)
        modules = dict(patcher.model.named_modules())
        streamer = WeightStreamer([modules[name] for name in plan.streamed], device,
                                  non_blocking=self.pin_memory, copy=self.stream_copy).install()
        on_release(streamer.remove)
        self._split.add(key)
        self.streamers[key] = streamer
        return True

    def loaded_weight_bytes(self, patcher: Any, *, whole_if_loaded: bool = False) -> int | None:
        """Bytes of the patcher's weights on the compute device by its plan (None when it has no
        plan and `whole_if_loaded` is false: the caller decides by the model's device)."""
        plan = self._plans.get(id(patcher.model))
        if plan is not None and id(patcher.model) in self._split:
            return plan.resident_bytes
        if not whole_if_loaded:
            return None
        if id(patcher.model) not in self._loaded or patcher.current_device() == self.offload_device:
            return 0
        return patcher.model_size()

    def lowvram_patch_count(self, patcher: Any) -> int:
        """Weight patches applied to streamed modules (ComfyUI's `lowvram_patch_counter`)."""
        plan = self._plans.get(id(patcher.model))
        if plan is None:
            return 0
        streamed = set(plan.streamed)
        return sum(1 for key, entries in patcher.patches.items() if entries and key.rpartition(".")[0] in streamed)

    def _fit(self, allowed: int, keep: int | None = None) -> int:
        """Offload LRU models (not `keep`, not in use) until the others fit in `allowed` bytes."""
        freed = 0
        for key, entry in list(self._loaded.items()):
            others = sum(_resident_bytes(e.patcher(), self) for k, e in self._loaded.items()
                         if k != keep and e.patcher() is not None)
            if others <= allowed:
                break
            patcher = entry.patcher()
            if key == keep or patcher is None or patcher.in_use:
                continue
            freed += self._offload(key, patcher)
        return freed

    def _offload(self, key: int, patcher: Any) -> int:
        size = _resident_bytes(patcher, self)
        release = getattr(patcher, "release_loaded", None)
        if callable(release):
            release()  # a model left patched by load_models_gpu (compat) is put back before it moves
        patcher.drop_weight_cache()
        if key in self._split or patcher.current_device() != self.offload_device:
            patcher.model.to(self.offload_device)
        self._split.discard(key)
        self._plans.pop(key, None)
        self.streamers.pop(key, None)
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
        log.warning("out of memory (%s); unloading models before the node is retried%s", exc, self._fall_back())
        self.free_all()
        return True

    def _fall_back(self) -> str:
        """Drop to the next lower VRAM mode; the log text saying so ("" when there is none)."""
        lower = fallback_mode(self.mode)
        if lower == self.mode:
            return ""
        previous, self.mode = self.mode, lower
        return f", in {lower.value} mode from now on (was {previous.value})"

    def retry_on_oom(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Call `fn`; on out-of-memory, unload every model and call it once more (then let it raise)."""
        try:
            return fn(*args, **kwargs)
        except BaseException as exc:
            if not is_out_of_memory(exc):
                raise
            log.warning("out of memory (%s); unloading models and retrying once%s", exc, self._fall_back())
        self.free_all()
        return fn(*args, **kwargs)


def _resident_bytes(patcher: Any, memory: "MemoryManager | None" = None) -> int:
    """Bytes a patcher's module holds on the compute device (its plan's resident part when loaded
    in part), cached patched weights included."""
    if patcher is None:
        return 0
    partial = memory.loaded_weight_bytes(patcher) if memory is not None else None
    return (patcher.model_size() if partial is None else partial) + patcher.weight_cache_bytes()
