"""Bookkeeping shared by every patcher over one base module.

Clones share the base module's tensors, so what is applied to it, who holds it and the originals
to put back must be shared too (ComfyUI shares `backup` between clones for the same reason). The
state lives on the module itself (`module.__dict__`), so independent patchers built over the same
module also share it; a deep copy of the module gets a fresh one.

Concurrency: any number of holders may use the module at once while they want the same
configuration (weight patches, object patches, device); a holder wanting a different one waits
until the module is free. The attention backend is not part of the configuration: it is
per-context (a ContextVar), so clones differing only in backend run concurrently.
"""
from __future__ import annotations

import contextlib
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterator

import torch
from torch import nn

from comfy_core.patching.errors import ObjectPatchError, PatchConflictError

_STATE_ATTR = "_comfy_patch_state"
_MISSING = object()


@dataclass
class PatchStats:
    """Counters for tests and benchmarks: how much work applying did."""

    applies: int = 0  # times patches were put on the module (first holder of a configuration)
    weights_computed: int = 0  # patched weights computed (not taken from the cache)
    weights_from_cache: int = 0


@dataclass
class _WeightBackup:
    owner: nn.Module
    attr: str
    is_param: bool
    original: torch.Tensor


@dataclass
class WeightCache:
    """Patched weights of the last applied weight patch set, keyed by parameter name.

    `pin` keeps the patch entries alive: patch data that takes no weak reference is fingerprinted
    by `id()` (comfy_core/patching/signature.py), which must not be reused while the entry exists.
    """

    signature: Hashable = None
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    pin: Any = None

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())


class BaseModuleState:
    """Who holds the module, with which configuration, and how to restore it."""

    def __init__(self) -> None:
        self.token = uuid.uuid4().hex  # stable identity for signatures (ids can be reused)
        self.stats = PatchStats()
        self.cache = WeightCache()
        self._cond = threading.Condition(threading.RLock())
        self._config: Hashable = None
        self._count = 0
        self._holders: dict[int, int] = {}
        self._weights: dict[str, _WeightBackup] = {}
        self._objects: list[tuple[Any, str, Any]] = []  # (parent, attr, original or _MISSING)

    @classmethod
    def of(cls, module: nn.Module) -> "BaseModuleState":
        # dict.setdefault is atomic under the GIL: two patchers built at once share one state.
        return module.__dict__.setdefault(_STATE_ATTR, cls())

    def __deepcopy__(self, memo: dict) -> "BaseModuleState":
        return BaseModuleState()

    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, _state: dict) -> None:
        self.__init__()

    @property
    def in_use(self) -> bool:
        return self._count > 0

    @property
    def active_config(self) -> Hashable:
        return self._config

    @contextlib.contextmanager
    def hold(self, config: Hashable, apply: Callable[[], None]) -> Iterator[None]:
        """Hold the module in `config`, applying it if this is the first holder; restore after the last."""
        me = threading.get_ident()
        with self._cond:
            while self._count and self._config != config:
                if self._holders.get(me):
                    raise PatchConflictError(
                        "this thread already holds the base module with another patch set; a clone "
                        "with different weight or object patches cannot be applied inside it")
                self._cond.wait()
            if self._count == 0:
                try:
                    apply()
                except BaseException:
                    self.restore()
                    raise
                self._config = config
                self.stats.applies += 1
            self._count += 1
            self._holders[me] = self._holders.get(me, 0) + 1
        try:
            yield
        finally:
            with self._cond:
                self._count -= 1
                left = self._holders[me] - 1
                if left:
                    self._holders[me] = left
                else:
                    del self._holders[me]
                if self._count == 0:
                    self._config = None
                    try:
                        self.restore()
                    finally:
                        self._cond.notify_all()

    # --- applying and restoring (called with the condition held) ---

    def swap_weight(self, owner: nn.Module, attr: str, key: str, patched: torch.Tensor) -> None:
        """Put `patched` in place of `owner.attr`, remembering the original tensor object."""
        if key in self._weights:
            raise ObjectPatchError(f"weight {key!r} is patched twice in one application")
        if attr in owner._parameters:
            original = owner._parameters[attr]
            self._weights[key] = _WeightBackup(owner, attr, True, original)
            owner._parameters[attr] = patched if isinstance(patched, nn.Parameter) else \
                nn.Parameter(patched, requires_grad=original.requires_grad)
        elif attr in owner._buffers:
            self._weights[key] = _WeightBackup(owner, attr, False, owner._buffers[attr])
            owner._buffers[attr] = patched
        else:
            raise ObjectPatchError(f"weight patch {key!r}: {attr!r} is not a parameter or buffer of {type(owner).__name__}")

    def set_object(self, parent: Any, attr: str, value: Any) -> None:
        original = getattr(parent, attr, _MISSING)
        self._objects.append((parent, attr, original))
        setattr(parent, attr, value)

    def restore(self) -> None:
        """Put back every original tensor object and attribute, weights first, in reverse order."""
        while self._weights:
            _key, b = self._weights.popitem()
            if b.is_param:
                b.owner._parameters[b.attr] = b.original
            else:
                b.owner._buffers[b.attr] = b.original
        while self._objects:
            parent, attr, original = self._objects.pop()
            if original is _MISSING:
                delattr(parent, attr)
            else:
                setattr(parent, attr, original)

    def clear_cache(self) -> int:
        """Drop the cached patched weights (e.g. before offloading); returns the bytes freed."""
        with self._cond:
            freed = self.cache.nbytes()
            self.cache = WeightCache()
            return freed
