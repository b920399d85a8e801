"""The generic reversible patcher: a shared base module plus patches kept as data.

ComfyUI's semantics (comfy/model_patcher.py): `clone()` shares the module and copies the patch
containers, `add_patches` records weight patches keyed by parameter name, `add_object_patch`
records attribute replacements, `model_options` carries options and hooks. Application follows
InvokeAI's context-manager style: `with patcher.applied(device) as module:` moves the module to
the device, applies everything, sets the attention backend for this context only, and restores
every original tensor object and attribute on exit, whatever ends the block.

Applying the same weight patch set again costs no arithmetic: the patched tensors of the last
set are cached (per base module, keyed by the weight signature) and swapped back in.

`cache_signature()` is the value-level identity the executor keys cached outputs on: two
patchers with equal signatures run the same module with the same patches, so a node given
either produces the same result (see graph/value_keys.py).
"""
from __future__ import annotations

import contextlib
import copy
from typing import Any, Hashable, Iterator

import torch
from torch import nn

from comfy_core import extension_points
from comfy_core.attention import AttentionChoice, require_backend, use_backend
from comfy_core.patching.errors import ObjectPatchError, PatchDataError
from comfy_core.patching.model_weight import ModelWeight
from comfy_core.patching.signature import fingerprint, freeze
from comfy_core.patching.state import BaseModuleState, PatchStats
from comfy_core.patching.weight_access import converters, stored_form, true_weight
from comfy_core.weights.entries import Offset, PatchEntry, apply_patches

ATTENTION_BACKEND = "attention_backend"
ATTENTION_OPTIONS = "attention_options"
# Attributes that are bookkeeping, not behaviour: left out of `cache_signature()`. Any other
# attribute a pack sets on a clone counts, so such a clone never shares a key with a plain one.
_BOOKKEEPING = frozenset({"model", "load_device", "offload_device", "patches", "object_patches",
                          "model_options", "parent", "cache_patched_weights", "memory", "_state", "_explicit",
                          # ModelPatcher's ComfyUI bookkeeping (comfy_core/patching/model_extensions.py)
                          "size", "weight_inplace_update", "hook_mode", "is_injected", "skip_injection",
                          "backup", "object_patches_backup"})


class Patcher:
    """A base `nn.Module` shared between clones, with weight patches, object patches and options.

    `load_device` is where `applied()` runs the module by default; `offload_device` is where the
    memory manager parks it. Nothing here mutates the module outside `applied()`.
    """

    def __init__(self, model: nn.Module, load_device: torch.device | str | None = None,
                 offload_device: torch.device | str | None = None, *, cache_patched_weights: bool = True) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"{type(self).__name__}: the base model must be a torch.nn.Module, got {type(model).__name__}")
        self.model = model
        self.load_device = torch.device(load_device if load_device is not None else "cpu")
        self.offload_device = torch.device(offload_device if offload_device is not None else "cpu")
        self.patches: dict[str, list[PatchEntry]] = {}
        self.object_patches: dict[str, Any] = {}
        self.model_options: dict[str, Any] = {"transformer_options": {}}
        self.parent: Patcher | None = None
        self.cache_patched_weights = cache_patched_weights
        # A comfy_core.memory.MemoryManager (set by its `track()`), told before each use.
        self.memory: Any = None
        self._state = BaseModuleState.of(model)
        self._explicit: contextlib.ExitStack | None = None

    # --- cloning ---

    def clone(self) -> "Patcher":
        """A new patcher over the same module; patch containers copied, options deep-copied."""
        n = self.__class__.__new__(self.__class__)
        n.__dict__.update(self.__dict__)
        n.patches = {k: list(v) for k, v in self.patches.items()}
        n.object_patches = dict(self.object_patches)
        n.model_options = copy.deepcopy(self.model_options)
        n.parent = self
        n._explicit = None
        return n

    def __deepcopy__(self, memo: dict) -> "Patcher":
        """`copy.deepcopy(patcher)`: an independent patcher over a deep copy of the base module.

        Packs deep-copy the VAE or MODEL they receive and change the copy's layers (seamless
        tiling sets `padding_mode="circular"` on the copy's `first_stage_model` convolutions), as
        ComfyUI's `comfy.sd.VAE` / `ModelPatcher` allow. Patches, options and other attributes
        are deep-copied with the module; the module's patch state is a fresh one
        (`BaseModuleState.__deepcopy__`), so the copy's module has its own lock and holders. The
        memory manager (`memory`, a service shared by every model, with its own lock) is shared,
        not copied; the copy has no parent and no explicit hold."""
        n = self.__class__.__new__(self.__class__)
        memo[id(self)] = n
        shared = {"memory": self.memory, "parent": None, "_explicit": None}
        for key, value in self.__dict__.items():
            n.__dict__[key] = shared[key] if key in shared else copy.deepcopy(value, memo)
        return n

    def is_clone(self, other: Any) -> bool:
        """True when `other` patches the same base module."""
        return isinstance(other, Patcher) and other.model is self.model

    def clone_has_same_weights(self, other: Any) -> bool:
        return self.is_clone(other) and self.weight_signature() == other.weight_signature()

    # --- weight patches ---

    def weight_keys(self) -> set[str]:
        """Names of the base module's parameters and buffers, the keys weight patches may use."""
        names = {n for n, _ in self.model.named_parameters()}
        names.update(n for n, _ in self.model.named_buffers())
        return names

    def add_patches(self, patches: dict[Any, Any], strength_patch: float = 1.0,
                    strength_model: float = 1.0) -> list:
        """Record weight patches; returns the keys that name a weight of the module (ComfyUI's rule).

        A key is a parameter name, or `(name, (dim, start, length))` / `(name, offset, function)`
        for a patch that covers part of a weight. Keys naming nothing are skipped and not returned:
        the caller reports them.
        """
        known = self.weight_keys()
        applied = []
        for raw_key, data in patches.items():
            key, offset, function = _split_key(raw_key)
            if key not in known:
                continue
            self.patches.setdefault(key, []).append(
                PatchEntry(float(strength_patch), data, float(strength_model), offset, function))
            applied.append(raw_key)
        return applied

    def get_key_patches(self, filter_prefix: str | None = None) -> dict[str, list]:
        """For each weight: `[(original,), *patch entries]` (ComfyUI's form, which packs read)."""
        result = {}
        for key, tensor in self.model_state_dict(filter_prefix).items():
            # A layer storing another form (scaled fp8) hands over its converter too, as ComfyUI's
            # `(weight, convert_func)`; the nested-list maths applies it (patching/weights.py).
            owner, attr = _resolve_parent(self.model, key)
            convert, _ = converters(owner, attr)
            head = (tensor,) if convert is None else (tensor, convert)
            result[key] = [head] + list(self.patches.get(key, ()))
        return result

    def weight_references(self, filter_prefix: str | None = None) -> dict[str, ModelWeight]:
        """For each weight: patch data standing for it with this patcher's patches on it (what
        `get_key_patches` gives, as a lazy `ModelWeight`: no tensor is held or copied)."""
        return {key: ModelWeight(self.model, key, self.patches.get(key, ()), tuple(tensor.shape))
                for key, tensor in self.model_state_dict(filter_prefix).items()}

    def model_state_dict(self, filter_prefix: str | None = None) -> dict[str, torch.Tensor]:
        """The base module's original tensors (never patched ones, even while some clone is
        applied), optionally by name prefix."""
        sd = {n: p.detach() for n, p in self.model.named_parameters()}
        sd.update((n, b) for n, b in self.model.named_buffers())
        for key, original in self._state.originals().items():
            if key in sd:
                sd[key] = original.detach()
        if filter_prefix is not None:
            sd = {k: v for k, v in sd.items() if k.startswith(filter_prefix)}
        return sd

    # --- object patches ---

    def add_object_patch(self, name: str, obj: Any) -> None:
        """Replace the attribute at dotted path `name` (relative to the base module) while applied."""
        if not isinstance(name, str) or not name:
            raise ObjectPatchError(f"object patch name must be a non-empty dotted path, got {name!r}")
        self.object_patches[name] = obj

    def get_model_object(self, name: str) -> Any:
        """The object at `name` as this patcher would see it: its object patch, else the module's."""
        if name in self.object_patches:
            return self.object_patches[name]
        return _get_attr(self.model, name)

    # --- options ---

    def set_option(self, key: str, value: Any) -> None:
        self.model_options[key] = value

    def set_attention_backend(self, name: str, **options: Any) -> None:
        """Make attention run on backend `name` (with its options) inside this patcher's `applied()`."""
        choice = AttentionChoice.of(name, options)
        self.model_options[ATTENTION_BACKEND] = choice.name
        self.model_options[ATTENTION_OPTIONS] = dict(choice.options)

    def attention_choice(self) -> AttentionChoice:
        name = self.model_options.get(ATTENTION_BACKEND)
        if name is None:
            return AttentionChoice()
        return AttentionChoice.of(name, self.model_options.get(ATTENTION_OPTIONS))

    # --- signatures ---

    def weight_signature(self) -> Hashable:
        return freeze(self._weight_parts())

    def object_signature(self) -> Hashable:
        return tuple(sorted((name, freeze(obj)) for name, obj in self.object_patches.items()))

    def signature(self) -> Hashable:
        """Identifies the base module and the whole patch set (weights, objects, options)."""
        return freeze(self._signature_parts())

    def cache_signature(self) -> Hashable | None:
        """The value-level identity cached outputs are keyed on, or None when some patch has no
        lasting identity (the executor then keys on the producing node instead).

        Covers the base module, every patch and option, and any attribute a pack set on the clone.
        """
        extra = {k: v for k, v in self.__dict__.items() if k not in _BOOKKEEPING}
        key, stable = fingerprint((self._signature_parts(), extra))
        return key if stable else None

    def _weight_parts(self) -> tuple:
        return tuple((key, tuple(entries)) for key, entries in sorted(self.patches.items()) if entries)

    def _signature_parts(self) -> tuple:
        objects = tuple(sorted(self.object_patches.items(), key=lambda item: item[0]))
        return (type(self).__name__, self._state.token, self._weight_parts(), objects, self.model_options)

    # --- application ---

    @property
    def patch_stats(self) -> PatchStats:
        return self._state.stats

    @property
    def in_use(self) -> bool:
        return self._state.in_use

    def drop_weight_cache(self) -> int:
        """Forget cached patched weights of this base module; returns bytes freed."""
        return self._state.clear_cache()

    def weight_cache_bytes(self) -> int:
        """Bytes held by cached patched weights of this base module."""
        return self._state.cache.nbytes()

    def model_size(self) -> int:
        """Bytes of the base module's parameters and buffers."""
        return sum(t.numel() * t.element_size() for t in self.model_state_dict().values())

    def current_device(self) -> torch.device:
        for t in self.model.parameters():
            return t.device
        return self.offload_device

    @contextlib.contextmanager
    def applied(self, device: torch.device | str | None = None) -> Iterator[nn.Module]:
        """Patch the module for the duration of the block and yield it; restore bit-exactly after.

        Moves the module to `device` (default `load_device`), applies object patches, then weight
        patches, and sets this patcher's attention backend for the current context only.
        """
        if self.memory is not None:
            device = self.memory.prepare(self, device)
        device = torch.device(device) if device is not None else self.load_device
        choice = self.attention_choice()
        require_backend(choice.name, device)  # fail before patching: names what is missing
        weight_sig = self.weight_signature()
        config = (weight_sig, self.object_signature(), str(device))
        with self._state.hold(config, lambda: self._apply(device, weight_sig)):
            with use_backend(choice):
                yield self.model

    def keep_loaded(self, device: torch.device | str | None = None) -> None:
        """ComfyUI's `load_models_gpu(patcher)`: the module stays patched as this patcher says after
        the call (object and weight patches, on `device`), until `release_loaded()` or until a
        patcher with other patches applies the same base module (`BaseModuleState.keep_resident`).
        Code that runs the module without `applied()` then sees the patches, as in ComfyUI."""
        device = torch.device(device) if device is not None else self.load_device
        weight_sig = self.weight_signature()
        config = (weight_sig, self.object_signature(), str(device))
        self._state.keep_resident(config, lambda: self._apply(device, weight_sig))

    def release_loaded(self) -> None:
        """Give up what `keep_loaded` kept (of whichever patcher of this base module)."""
        self._state.end_resident()

    def applied_tensor(self, key: str) -> torch.Tensor:
        """The tensor the module holds at parameter/buffer `key` now (inside `applied()`: the
        patched one, what an overlay is computed from)."""
        owner, attr = _resolve_parent(self.model, key)
        tensor = owner._parameters.get(attr) if attr in owner._parameters else owner._buffers.get(attr)
        if tensor is None:
            raise PatchDataError(f"{key!r}: the module has no tensor there")
        return tensor

    @contextlib.contextmanager
    def overlay_weights(self, tensors: dict[str, torch.Tensor]) -> Iterator[None]:
        """Inside `applied()`: run the block with `tensors` (by parameter name) in place of the
        applied weights, then put the applied tensor objects back. For weights that change
        within a run, such as a hook group's (comfy_core/hooks/sampling.py); see
        `BaseModuleState.overlay` for who may use the module meanwhile."""
        swaps = []
        for key, tensor in tensors.items():
            owner, attr = _resolve_parent(self.model, key)
            current = self.applied_tensor(key)
            if attr in owner._parameters and not isinstance(tensor, nn.Parameter):
                tensor = nn.Parameter(tensor, requires_grad=current.requires_grad)
            swaps.append((owner, attr, key, tensor))
        with self._state.overlay(swaps):
            yield

    def patch_model(self, device_to: torch.device | str | None = None, *_args: Any, **_kwargs: Any) -> nn.Module:
        """ComfyUI's explicit form: apply until `unpatch_model()` (same thread). Prefer `applied()`."""
        if self._explicit is not None:
            return self.model
        stack = contextlib.ExitStack()
        module = stack.enter_context(self.applied(device_to))
        self._explicit = stack
        return module

    def unpatch_model(self, device_to: torch.device | str | None = None, *_args: Any, **_kwargs: Any) -> None:
        if self._explicit is not None:
            stack, self._explicit = self._explicit, None
            stack.close()
        self.release_loaded()  # ComfyUI's unpatch puts the shared weights back, whoever loaded them
        if device_to is not None and not self.in_use:
            self.model.to(device_to)

    def _apply(self, device: torch.device, weight_sig: Hashable) -> None:
        state = self._state
        # Whatever the model computed from its weights (CPU convolution weights packed by
        # comfy_core/models/conv_prepack.py) is stale once they change: dropped now and again when
        # the state puts the originals back (in-place restores do not move a version counter).
        forget = getattr(self.model, "forget_derived_weights", None)
        if forget is not None:
            forget()
            state.on_restore(forget)
        # The memory manager places a model it loads in part (comfy_core/memory_stream.py).
        place = getattr(self.memory, "place", None) if self.memory is not None else None
        if not (place is not None and place(self, device, state.on_restore)) and self.current_device() != device:
            self.model.to(device)
        for name, obj in self.object_patches.items():
            parent, attr = _resolve_parent(self.model, name)
            state.set_object(parent, attr, obj)
        if not weight_sig:
            return
        reuse = self.cache_patched_weights and state.cache.signature == weight_sig
        if not reuse:
            state.clear_cache()  # before computing: never hold two sets of patched weights at once
        cache = state.cache
        fresh: dict[str, torch.Tensor] = {}
        # Weights are computed in ComfyUI's argument order, on a float32 copy (as ComfyUI's
        # patch_weight_to_device), by the extension points' `calculate_weight` when a pack set one
        # (`comfy.lora.calculate_weight = f`), else ours.
        # The maths sees the true weight (a scaled-fp8 layer's stored fp8 times its scale) and the
        # result is stored back as the layer stores it (comfy_core/patching/weight_access.py); plain
        # weights in their dtype as ComfyUI stores them: fp8 by seeded stochastic rounding.
        calculate_weight = extension_points.current().calculate_weight or apply_patches

        with torch.no_grad():
            for key, entries in self.patches.items():
                if not entries:
                    continue
                owner, attr = _resolve_parent(self.model, key)
                original = owner._parameters.get(attr) if attr in owner._parameters else owner._buffers.get(attr)
                if original is None:
                    raise PatchDataError(f"weight patch {key!r}: the module has no tensor there")
                patched = cache.tensors.get(key) if reuse else None
                if patched is None or patched.device != original.device or patched.dtype != original.dtype:
                    working = true_weight(owner, attr, original)
                    patched = stored_form(owner, attr, key, calculate_weight(entries, working, key),
                                          original.dtype)
                    if attr in owner._parameters:
                        patched = nn.Parameter(patched, requires_grad=original.requires_grad)
                    state.stats.weights_computed += 1
                else:
                    state.stats.weights_from_cache += 1
                fresh[key] = patched
                state.swap_weight(owner, attr, key, patched, getattr(self, "weight_inplace_update", False))
        if self.cache_patched_weights:
            cache.signature, cache.tensors = weight_sig, fresh
            cache.pin = {k: list(v) for k, v in self.patches.items()}
        else:
            state.clear_cache()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({type(self.model).__name__}, {len(self.patches)} weight patches, "
                f"{len(self.object_patches)} object patches, load_device={self.load_device})")


def _split_key(raw: Any) -> tuple[str, Offset | None, Any]:
    if isinstance(raw, str):
        return raw, None, None
    if isinstance(raw, tuple) and raw and isinstance(raw[0], str):
        offset = Offset(*raw[1]) if len(raw) > 1 and raw[1] is not None else None
        function = raw[2] if len(raw) > 2 else None
        return raw[0], offset, function
    raise PatchDataError(f"weight patch key must be a name or (name, offset[, function]), got {raw!r}")


def _get_attr(root: Any, dotted: str) -> Any:
    obj = root
    for part in dotted.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ObjectPatchError(f"{type(root).__name__} has no attribute path {dotted!r} (failed at {part!r})") from None
    return obj


def _resolve_parent(root: Any, dotted: str) -> tuple[Any, str]:
    head, _, last = dotted.rpartition(".")
    return (_get_attr(root, head) if head else root), last
