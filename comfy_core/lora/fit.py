"""Whether a LoRA record fits the weight (or weight slice) it names, decided before any arithmetic.

ComfyUI (comfy/lora.py `calculate_weight`, comfy/weight_adapter/lora.py) skips a record whose
delta does not fit its weight, with a logged error, and leaves that weight as it is: a LoRA
trained on another width of the same family (a Flux "lite", an SD3.5 large LoRA on SD3.5 medium)
loads what fits. We decide it when the file is loaded, from shapes only: the size of each
adapter's delta (LoRA/LoCon/DoRA, LoHa, LoKr) follows from its factors' shapes, the adapters
reshape a delta of the right size onto the weight; full `diff` / `set` tensors must have its shape.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, NamedTuple

import torch

from comfy_core.weights.adapters import BoftAdapter, GloraAdapter, LohaAdapter, LokrAdapter, LoraAdapter, OftAdapter
from comfy_core.weights.errors import PatchDataError


def target_shape(raw_key: Any, shapes: Mapping[str, tuple[int, ...]]) -> tuple[int, ...] | None:
    """The shape a patch keyed `raw_key` (a name, `(name, (dim, offset, size))` or
    `(name, None, fn)`) writes into, or None when the module has no tensor of that name."""
    name = raw_key if isinstance(raw_key, str) else raw_key[0]
    shape = shapes.get(name)
    if shape is None:
        return None
    shape = tuple(shape)
    offset = None if isinstance(raw_key, str) or len(raw_key) < 2 else raw_key[1]
    if offset is None:
        return shape
    dim, start, size = offset
    if dim >= len(shape) or start + size > shape[dim]:
        return ()  # a slice outside the tensor: fits nothing
    return shape[:dim] + (size,) + shape[dim + 1:]


def _numel(*sizes: int) -> int:
    return math.prod(int(n) for n in sizes)


def delta_numel(record: Any) -> int | None:
    """How many values `record`'s delta has, from its factors' shapes (the products the adapters
    of `comfy_core.weights.adapters` form); None for a kind with no shape rule here. Raises
    `PatchDataError` when the factors do not multiply (inner sizes disagree)."""
    if isinstance(record, LoraAdapter):
        up, down = record.up.flatten(start_dim=1).shape, record.down.flatten(start_dim=1).shape  # [out, r], [r, in..]
        if record.mid is None:
            if up[1] != down[0]:
                raise PatchDataError(f"up {tuple(record.up.shape)} and down {tuple(record.down.shape)} do not multiply")
            return _numel(up[0], down[1])
        mid = record.mid.shape  # [r_a, r_b, kh, kw]
        if up[1] != mid[0] or mid[1] != record.down.shape[0]:
            raise PatchDataError(f"up, mid and down of shapes {tuple(record.up.shape)}, {tuple(mid)}, "
                                 f"{tuple(record.down.shape)} do not multiply")
        return _numel(up[0], record.down.shape[1], *mid[2:])
    if isinstance(record, LohaAdapter):
        if record.t1 is None:  # (w1a @ w1b) * (w2a @ w2b)
            return _numel(record.w1a.shape[0], math.prod(record.w1b.shape[1:]))
        return _numel(record.w1a.shape[1], record.w1b.shape[1], *record.t1.shape[2:])
    if isinstance(record, LokrAdapter):  # kron(w1, w2)
        w1 = (_numel(*record.w1.shape) if record.w1 is not None
              else _numel(record.w1a.shape[0], record.w1b.shape[1]))
        if record.w2 is not None:
            w2 = _numel(*record.w2.shape)
        elif record.t2 is not None:
            w2 = _numel(record.w2a.shape[1], record.w2b.shape[1], *record.t2.shape[2:])
        else:
            w2 = _numel(record.w2a.shape[0], math.prod(record.w2b.shape[1:]))
        return w1 * w2
    return None


def misfit(record: Any, shape: tuple[int, ...]) -> str | None:
    """Why `record` (an adapter, or `("diff"|"set", (tensor,))`) cannot patch a tensor of `shape`;
    None when it can (or when its kind has no shape to check)."""
    if shape == ():
        return "its slice lies outside the weight"
    if isinstance(record, tuple) and len(record) == 2 and record[0] in ("diff", "set"):
        tensor = record[1][0]
        if isinstance(tensor, torch.Tensor) and tuple(tensor.shape) != shape:
            return f"{record[0]} of shape {tuple(tensor.shape)} does not fit weight of shape {shape}"
        return None
    if isinstance(record, (OftAdapter, BoftAdapter)):  # rotations of the output rows, in blocks
        blocks = record.blocks.shape  # OFT [k, n, n], BOFT [m, k, b, b]
        rows = blocks[-3] * blocks[-1]
        if len(shape) < 2 or rows != shape[0]:
            return f"rotation blocks {tuple(blocks)} cover {rows} rows, not a weight of shape {shape}"
        return None
    if isinstance(record, GloraAdapter):
        if len(shape) < 2:
            return f"GLoRA does not patch a weight of shape {shape}"
        try:
            record.layout(torch.empty(shape, device="meta"))
        except PatchDataError as exc:
            return str(exc)
        return None
    if isinstance(record, LoraAdapter) and record.reshape is not None:
        if len(record.reshape) != len(shape) or any(n < have for n, have in zip(record.reshape, shape)):
            return f"cannot widen a weight of shape {shape} to {record.reshape}"
        shape = record.reshape  # the delta fits the widened weight
    try:
        numel = delta_numel(record)
    except PatchDataError as exc:
        return str(exc)
    if numel is not None and numel != math.prod(shape):
        return f"a delta of {numel} values does not fit weight of shape {shape}"
    return None


class Misfit(NamedTuple):
    """A record left out because it cannot patch its target: the parameter it names, the
    record, and why."""

    name: str
    record: Any
    reason: str
    shape: tuple[int, ...]  # what the record would write into (a slice's own shape; () outside)

    def line(self) -> str:
        return f"{self.name}: {self.reason}"


def drop_misfits(patches: Mapping[Any, Any], shapes: Mapping[str, tuple[int, ...]]) -> tuple[dict, list[Misfit]]:
    """`patches` without the records that do not fit their target, and the dropped records (what
    they name and why). Patches naming no tensor of `shapes` are kept: the patcher skips them."""
    kept: dict = {}
    dropped: list[Misfit] = []
    for raw_key, record in patches.items():
        shape = target_shape(raw_key, shapes)
        reason = None if shape is None else misfit(record, shape)
        if reason is None:
            kept[raw_key] = record
        else:
            dropped.append(Misfit(raw_key if isinstance(raw_key, str) else raw_key[0], record, reason, shape))
    return kept, dropped
