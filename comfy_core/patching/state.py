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


def _set_attribute(parent: Any, attr: str, value: Any) -> None:
    """`setattr(parent, attr, value)`, also where an `nn.Module`'s attribute turns from a child
    module into another object: `nn.Module` refuses to set a non-module over a registered child
    (an `nn.Module` sampling object patched over the model's plain one, then restored), so that
    child is unregistered first."""
    if isinstance(parent, nn.Module) and value is not None and not isinstance(value, nn.Module):
        parent._modules.pop(attr, None)
    setattr(parent, attr, value)


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
    original: torch.Tensor  # the original tensor object, or a copy of its values (`inplace`)
    inplace: bool = False  # the patched values were copied into the module's own tensor


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
        # One hold kept after its call by `keep_resident` (ComfyUI's `load_models_gpu` leaves a model
        # patched): counted in `_count`, owned by no thread, given up when another configuration is wanted.
        self._resident = 0
        self._weights: dict[str, _WeightBackup] = {}
        self._objects: list[tuple[Any, str, Any]] = []  # (parent, attr, original or _MISSING)
        self._on_restore: list[Callable[[], None]] = []  # run once `restore` put the originals back
        # A weight overlay (`overlay`): the thread that has one on, the threads waiting for one,
        # and the tensors it replaced (the applied ones, put back when it ends).
        self._overlay_owner: int | None = None
        self._overlay_waiting: set[int] = set()
        self._overlay: dict[str, _WeightBackup] = {}

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
        """Someone computes with the module now (a `keep_resident` hold alone does not count: the
        memory manager may give it up and move the module)."""
        return self._count - self._resident > 0

    @property
    def active_config(self) -> Hashable:
        return self._config

    @contextlib.contextmanager
    def hold(self, config: Hashable, apply: Callable[[], None]) -> Iterator[None]:
        """Hold the module in `config`, applying it if this is the first holder; restore after the last."""
        me = threading.get_ident()
        with self._cond:
            while (self._count and self._config != config) or self._overlay_blocks(me):
                if self._count and self._config != config and self._count == self._resident:
                    self._end_resident()  # nobody uses the resident configuration: put it back now
                    continue
                if self._holders.get(me) and self._count and self._config != config:
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
                if self._overlay_waiting:
                    self._cond.notify_all()  # an overlay waits for the other holders to leave
                if self._count == 0:
                    self._config = None
                    try:
                        self.restore()
                    finally:
                        self._cond.notify_all()

    def keep_resident(self, config: Hashable, apply: Callable[[], None]) -> None:
        """Leave the module in `config` after this call, as ComfyUI's `load_models_gpu` leaves a
        model patched, so that code using the module directly (a pack calling a text encoder's
        tower after `load_model_gpu(clip.patcher)`) sees it. The hold is given up, the originals
        put back, by `end_resident()` or as soon as a holder wants another configuration."""
        me = threading.get_ident()
        with self._cond:
            if self._resident and self._config == config:
                return
            while (self._count and self._config != config) or self._overlay_blocks(me):
                if self._count and self._config != config and self._count == self._resident:
                    self._end_resident()
                    continue
                if self._holders.get(me) and self._count and self._config != config:
                    raise PatchConflictError(
                        "this thread holds the base module with another patch set; a clone with different "
                        "weight or object patches cannot be loaded inside it")
                self._cond.wait()
            if self._count == 0:
                try:
                    apply()
                except BaseException:
                    self.restore()
                    raise
                self._config = config
                self.stats.applies += 1
            if not self._resident:
                self._count += 1
                self._resident = 1

    def end_resident(self) -> None:
        """Give up the `keep_resident` hold, if any (the originals are put back when nobody else holds)."""
        with self._cond:
            self._end_resident()

    def _end_resident(self) -> None:
        if not self._resident:
            return
        self._resident = 0
        self._count -= 1
        self._cond.notify_all()
        if self._count == 0:
            self._config = None
            self.restore()

    # --- applying and restoring (called with the condition held) ---

    def swap_weight(self, owner: nn.Module, attr: str, key: str, patched: torch.Tensor, inplace: bool = False) -> None:
        """Put `patched` in place of `owner.attr`, remembering the original tensor object; with
        `inplace` (ComfyUI's `weight_inplace_update`), copy its values into the module's own tensor
        instead, remembering a copy of the original values (a patched value of another shape or
        dtype is swapped in as without it)."""
        if key in self._weights:
            raise ObjectPatchError(f"weight {key!r} is patched twice in one application")
        live = owner._parameters.get(attr) if attr in owner._parameters else owner._buffers.get(attr)
        if inplace and live is not None and live.shape == patched.shape and live.dtype == patched.dtype:
            # The backup first: `original_tensor` (read without the lock) then never sees patched values.
            self._weights[key] = _WeightBackup(owner, attr, attr in owner._parameters, live.detach().clone(), True)
            with torch.no_grad():
                live.copy_(patched)
            return
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

    def _overlay_blocks(self, me: int) -> bool:
        """A new holder waits while another thread has (or waits for) an overlay; a thread that
        already holds the module never waits here (it may re-enter inside its own overlay)."""
        if self._holders.get(me):
            return False
        return self._overlay_owner not in (None, me) or bool(self._overlay_waiting - {me})

    @contextlib.contextmanager
    def overlay(self, swaps: list[tuple[nn.Module, str, str, torch.Tensor]]) -> Iterator[None]:
        """Put `(owner, attr, key, tensor)` tensors in place of the applied ones for the block,
        then put the applied tensor objects back (bit-exact: the same objects).

        For weights that exist only for part of a run (a hook group's, comfy_core/hooks/): the
        calling thread must hold the module (be inside `applied()`), and the overlay waits until
        no other thread holds it; new holders wait until it ends. Two threads holding one module
        and both wanting an overlay would wait for each other: the second gets a
        PatchConflictError instead.
        """
        me = threading.get_ident()
        with self._cond:
            if not self._holders.get(me):
                raise PatchConflictError("a weight overlay needs the base module held (inside applied())")
            if self._overlay_owner == me:
                raise PatchConflictError("a weight overlay is already on in this thread; overlays do not nest")
            self._overlay_waiting.add(me)
            try:
                while self._count - self._resident != self._holders[me]:  # the resident hold computes nothing
                    if self._overlay_waiting - {me}:
                        raise PatchConflictError(
                            "two threads share this base module and both want weight overlays (hook "
                            "groups) at once; run them one after the other")
                    self._cond.wait()
            finally:
                self._overlay_waiting.discard(me)
            self._overlay_owner = me
            try:
                for owner, attr, key, tensor in swaps:
                    if key in self._overlay:
                        raise ObjectPatchError(f"weight {key!r} is overlaid twice")
                    is_param = attr in owner._parameters
                    store = owner._parameters if is_param else owner._buffers
                    self._overlay[key] = _WeightBackup(owner, attr, is_param, store[attr])
                    store[attr] = tensor
            except BaseException:
                self._end_overlay()
                raise
        try:
            yield
        finally:
            with self._cond:
                self._end_overlay()

    def _end_overlay(self) -> None:
        """Put the applied tensors back, in reverse order (called with the condition held)."""
        try:
            while self._overlay:
                _key, b = self._overlay.popitem()
                (b.owner._parameters if b.is_param else b.owner._buffers)[b.attr] = b.original
        finally:
            self._overlay_owner = None
            self._cond.notify_all()

    def original_tensor(self, module: nn.Module, key: str) -> torch.Tensor:
        """The module's own tensor `key` (a parameter or buffer name), never a patched one, even
        while a patch set is applied (from any thread: no lock is taken, see `restore`)."""
        backup = self._weights.get(key) or self._overlay.get(key)
        if backup is not None:
            return backup.original
        try:
            live = module.get_parameter(key)
        except AttributeError:
            live = module.get_buffer(key)
        backup = self._weights.get(key)  # swapped in meanwhile: the backup holds the original
        return live if backup is None else backup.original

    def originals(self) -> dict[str, torch.Tensor]:
        """`{key: original tensor}` for the weights a patched tensor currently replaces."""
        out = {key: backup.original for key, backup in list(self._overlay.items())}
        out.update((key, backup.original) for key, backup in list(self._weights.items()))
        return out

    def set_object(self, parent: Any, attr: str, value: Any) -> None:
        original = getattr(parent, attr, _MISSING)
        self._objects.append((parent, attr, original))
        _set_attribute(parent, attr, value)

    def on_restore(self, callback: Callable[[], None]) -> None:
        """Run `callback()` after the next `restore` (a patcher undoing what it set on the module's
        own tensors, comfy_core/patching/model.py `_patch_weights_one_by_one`)."""
        self._on_restore.append(callback)

    def restore(self) -> None:
        """Put back every original tensor object and attribute, weights first, in reverse order,
        then run the `on_restore` callbacks."""
        while self._weights:
            key = next(reversed(self._weights))
            b = self._weights[key]
            store = b.owner._parameters if b.is_param else b.owner._buffers
            if b.inplace:
                with torch.no_grad():
                    store[b.attr].copy_(b.original)
            else:
                store[b.attr] = b.original
            # Forgotten only once the original is back: `original_tensor` (read from other
            # threads, without the lock) always finds the original in one of the two places.
            del self._weights[key]
        while self._objects:
            parent, attr, original = self._objects.pop()
            if original is _MISSING:
                delattr(parent, attr)
            else:
                _set_attribute(parent, attr, original)
        while self._on_restore:
            self._on_restore.pop()()

    def clear_cache(self) -> int:
        """Drop the cached patched weights (e.g. before offloading); returns the bytes freed."""
        with self._cond:
            freed = self.cache.nbytes()
            self.cache = WeightCache()
            return freed
