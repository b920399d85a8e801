"""Weight patch arithmetic: pure functions from an original weight and patch entries to a new one.

A weight patch entry is ComfyUI's 5-tuple `(strength_patch, data, strength_model, offset,
function)` (comfy/model_patcher.py, comfy/lora.py: `calculate_weight`), applied in order to an
fp32 copy of the original weight, always recomputed from the original so patching never drifts:

    weight[offset] *= strength_model                (when != 1; the whole weight without an offset)
    weight[offset] = combine(weight[offset], strength_patch, data, function)

`data` may be:
- a tensor, or a 1-tuple `(tensor,)`, or `("diff", (tensor,))`: `weight += function(strength * t)`;
- `("set", (tensor,))`: `weight = t` (strength ignored, as ComfyUI does);
- a list `[(w2,) or (w2, convert), *entries]`: the weight `w2` (made true by `convert`, ComfyUI's
  `convert_func`) patched by `entries` (ComfyUI's nested form, used by model merging), then
  added like a diff;
- a `WeightAdapter`: any object with `apply_to(weight, strength, function) -> weight` (the LoRA
  family in `comfy_core.weights.adapters`; another model's weight, `comfy_core.patching.model_weight`);
- ComfyUI's older tuples `("lora"|"loha"|"lokr", (...))`, converted to those adapters.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Protocol, Sequence, runtime_checkable

import torch

from comfy_core.weights.adapters import adapter_from_legacy
from comfy_core.weights.errors import PatchDataError
from comfy_core.weights.function import Function, identity

__all__ = ["Function", "Offset", "PatchEntry", "WeightAdapter", "apply_entries", "calculate_weight", "identity"]

_LEGACY_ADAPTERS = ("lora", "loha", "lokr")


@runtime_checkable
class WeightAdapter(Protocol):
    """A structured weight patch (LoRA, LoHa, LoKr, ...)."""

    def apply_to(self, weight: torch.Tensor, strength: float, function: Function) -> torch.Tensor:
        """Return the patched fp32 `weight` (may be modified in place)."""
        ...


class Offset(NamedTuple):
    """A patch that covers `weight.narrow(dim, start, length)` only (fused qkv weights)."""

    dim: int
    start: int
    length: int


class PatchEntry(NamedTuple):
    strength_patch: float
    data: Any
    strength_model: float = 1.0
    offset: Offset | None = None
    function: Function | None = None


def calculate_weight(weight: torch.Tensor, entries: Sequence[PatchEntry | tuple], key: str,
                     compute_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The patched weight: `entries` applied in order to a `compute_dtype` copy of `weight`.

    Returns a new tensor in `weight`'s dtype and device; `weight` itself is never modified.
    """
    out = weight.to(dtype=compute_dtype, copy=True)
    out = _apply_entries(out, entries, key)
    return out.to(weight.dtype)


def apply_patches(patches: Sequence[PatchEntry | tuple], weight: torch.Tensor, key: str,
                  intermediate_dtype: torch.dtype = torch.float32, original_weights: Any = None) -> torch.Tensor:
    """The patched weight in ComfyUI's argument order (`comfy.lora.calculate_weight(patches,
    weight, key)`): `patches` applied in order to `weight`, worked on in `intermediate_dtype` (in
    place where it already is that dtype); returned in `weight`'s dtype. `original_weights`
    (ComfyUI's, for "model_as_lora") is not needed: our merge patches carry the other model's
    weight themselves.

    The patchers call this unless the `ExtensionPoints` in force name another `calculate_weight`
    (a pack assigning `comfy.lora.calculate_weight`, as Easy-Use's layer_diffuse does)."""
    working = weight if weight.dtype == intermediate_dtype else weight.to(intermediate_dtype)
    out = _apply_entries(working, list(patches), key)
    return out if out.dtype == weight.dtype else out.to(weight.dtype)


def apply_entries(weight: torch.Tensor, entries: Sequence[PatchEntry | tuple], key: str) -> torch.Tensor:
    """`entries` applied in order to the working tensor `weight` (already a copy in the compute
    dtype; modified in place where it can be) -- `calculate_weight` without the copy and the cast
    back, for nested patch data evaluated inside another weight's computation."""
    return _apply_entries(weight, entries, key)


def _apply_entries(weight: torch.Tensor, entries: Sequence[PatchEntry | tuple], key: str) -> torch.Tensor:
    for raw in entries:
        entry = PatchEntry(*raw)
        if entry.offset is not None:
            # As ComfyUI: strength_model scales the slice the entry covers, not the whole weight.
            dim, start, length = entry.offset
            view = weight.narrow(dim, start, length)
            if entry.strength_model != 1.0:
                view *= entry.strength_model
            view.copy_(_combine(view.clone(), entry, key))
        else:
            if entry.strength_model != 1.0:
                weight *= entry.strength_model
            weight = _combine(weight, entry, key)
    return weight


def _combine(weight: torch.Tensor, entry: PatchEntry, key: str) -> torch.Tensor:
    data, strength = entry.data, entry.strength_patch
    function = entry.function if entry.function is not None else identity
    if isinstance(data, WeightAdapter):
        return data.apply_to(weight, strength, function)
    if isinstance(data, list):
        if not data or not isinstance(data[0], tuple) or not isinstance(data[0][0], torch.Tensor):
            raise PatchDataError(f"weight patch {key!r}: a nested patch list must start with (weight,)")
        base = data[0][0].to(device=weight.device, dtype=weight.dtype, copy=True)
        if len(data[0]) > 1 and callable(data[0][1]):  # ComfyUI's `(weight, convert_func)`: the true weight
            base = data[0][1](base, inplace=True)
        data = _apply_entries(base, data[1:], key)
    kind = "diff"
    if isinstance(data, tuple):
        if len(data) == 2 and data[0] in _LEGACY_ADAPTERS:
            return adapter_from_legacy(data[0], data[1], key).apply_to(weight, strength, function)
        if len(data) == 2 and isinstance(data[0], str):
            kind, args = data
            if not isinstance(args, (tuple, list)) or len(args) != 1:
                raise PatchDataError(f"weight patch {key!r}: {kind!r} patch wants a 1-tuple of tensors, got {type(args).__name__}")
            data = args[0]
        elif len(data) == 1:
            data = data[0]
    if kind == "diff" and strength == 0.0:
        # As ComfyUI's calculate_weight: a zero-strength diff is never read, so packs (and
        # ComfyUI's attention-multiply nodes) pass `(None,)` to scale a weight by strength_model.
        return weight
    if not isinstance(data, torch.Tensor):
        raise PatchDataError(
            f"weight patch {key!r}: unsupported patch data {type(data).__name__}; expected a tensor, "
            f"('diff'|'set', (tensor,)), a nested list or a WeightAdapter")
    delta = data.to(device=weight.device, dtype=weight.dtype)
    if delta.shape != weight.shape:
        raise PatchDataError(
            f"weight patch {key!r}: {kind} of shape {tuple(delta.shape)} does not fit weight of "
            f"shape {tuple(weight.shape)}")
    if kind == "set":
        return weight.copy_(delta)
    if kind != "diff":
        raise PatchDataError(f"weight patch {key!r}: unknown patch kind {kind!r} (known: 'diff', 'set')")
    weight += function(strength * delta)
    return weight
