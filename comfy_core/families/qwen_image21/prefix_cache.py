"""Qwen-Image 2.1's prefix key/value cache for one sampling run (after ComfyUI's
`comfy/ldm/qwen_image21/model.py` policy, written here afresh).

The prefix (text and reference tokens) of the DiT's sequence is modulated at timestep 0 and
attends causally, so its keys and values in every block depend only on the prompt's states, the
reference latents, their slots and the target's size (dit.py). The first call of a run for a given
prefix fills a *slot* with them (per block, `[B, H, P, d]` each, rotated); later calls with the same
prefix (the other steps; the negative prompt has its own slot) read them back and run the target
tokens alone. A slot is found by `prefix_cache_key`, which holds everything the prefix depends on.

Where and how the slots are kept is QwenImage21Cache's setting (`qwen_image21_cache`):

- `device`: "gpu" keeps them on the compute device, "cpu" in host memory, "auto" on the compute
  device while it has four times the slot's size free and in host memory otherwise; a slot
  that does not fit where it goes (less than twice its size free on an accelerator) is not made
  and that call recomputes its prefix ("off", handled by the network, never caches);
- `dtype`: "default" keeps the tensors as computed (lossless), "int8" one signed byte per value
  with a scale per (sample, head, token) (absmax / 127), "int4" two values per byte (absmax / 7,
  offset by 8), a quarter of the size at about twice int8's error.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from comfy_core.memory import device_free_memory

CPU = torch.device("cpu")


class PrefixCacheError(RuntimeError):
    """A cached prefix read before it was filled (a network bug, never user input)."""


def prefix_cache_key(x: torch.Tensor, context: torch.Tensor, refs: Sequence[torch.Tensor],
                     slots: Sequence[int]) -> torch.Tensor:
    """[B, K] float32: per sample the text length, reference count, target size, slots and
    reference sizes, then the prompt's states and the reference latents, flattened. Two calls
    with equal keys have equal prefixes (the reference positions are centred on the target,
    hence its size)."""
    header = [context.shape[1], len(refs), *x.shape[-2:], *slots, *(s for r in refs for s in r.shape[-2:])]
    head = torch.tensor(header, dtype=torch.float32, device=context.device).expand(context.shape[0], -1)
    return torch.cat([head, context.float().flatten(1), *(r.float().flatten(1) for r in refs)], dim=1)


def _quantize(t: torch.Tensor, dtype: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """t [B, H, P, d] -> (values, scale [B, H, P, 1] or None) in the storage precision."""
    if dtype == "default":
        return t.detach().clone(), None
    wide = t.detach().float()
    levels = 127.0 if dtype == "int8" else 7.0
    scale = wide.abs().amax(dim=-1, keepdim=True).clamp_min(torch.finfo(torch.float32).tiny) / levels
    q = torch.round(wide / scale).clamp_(-levels, levels).to(torch.int8)
    if dtype == "int8":
        return q, scale
    if q.shape[-1] % 2:
        raise PrefixCacheError(f"int4 prefix cache: head width {q.shape[-1]} is odd")
    nibbles = (q + 8).to(torch.uint8)  # 1..15
    return nibbles[..., 0::2] | (nibbles[..., 1::2] << 4), scale


def _dequantize(values: torch.Tensor, scale: torch.Tensor | None, dtype: str, device: Any,
                out_dtype: torch.dtype) -> torch.Tensor:
    values = values.to(device, non_blocking=True)
    if dtype == "default":
        return values.to(out_dtype)
    scale = scale.to(device)
    if dtype == "int4":
        low, high = (values & 0x0F).to(torch.int16) - 8, (values >> 4).to(torch.int16) - 8
        values = torch.stack([low, high], dim=-1).flatten(-2)
    return (values.float() * scale).to(out_dtype)


class _Slot:
    __slots__ = ("key", "kv", "filled")

    def __init__(self, key: torch.Tensor) -> None:
        self.key = key
        self.kv: dict[int, tuple] = {}
        self.filled = False


class PrefixKVCache:
    """The slots of one sampling run (see the module docstring); `select` a slot per call, then
    `put` (filling) or `take` (reading) block by block, and `mark_filled` after the last block."""

    def __init__(self, device: str, dtype: str, compute_device: torch.device | str) -> None:
        self.device_setting = device
        self.dtype = dtype
        self.compute_device = torch.device(compute_device)
        self.store_device: torch.device | None = None
        self.slots: list[_Slot] = []
        self.current: _Slot | None = None

    def _store_for(self, nbytes: int) -> torch.device | None:
        if self.store_device is not None:
            return self.store_device
        if self.device_setting == "cpu" or self.compute_device.type == "cpu":
            return CPU
        free = device_free_memory(self.compute_device)
        if self.device_setting == "gpu":
            return self.compute_device
        return self.compute_device if free is not None and free > 4 * nbytes else CPU

    def select(self, key: torch.Tensor, nbytes: int) -> bool:
        """Make the slot of `key` current (an existing one, or a new one of about `nbytes` before
        quantisation); False when a new slot does not fit where it would be kept."""
        for slot in self.slots:
            if slot.key.shape == key.shape and torch.equal(slot.key, key.to(slot.key.device)):
                self.current = slot
                return True
        nbytes //= {"int8": 2, "int4": 4}.get(self.dtype, 1)
        store = self._store_for(nbytes)
        if store is None:
            return False
        if store.type != "cpu":
            free = device_free_memory(store)
            if free is not None and free <= 2 * nbytes:
                return False  # recompute rather than push the other conditioning's slot out
        self.store_device = store
        self.current = _Slot(key.detach().clone())
        self.slots.append(self.current)
        return True

    def _slot(self) -> _Slot:
        if self.current is None:
            raise PrefixCacheError("prefix cache used without a selected slot")
        return self.current

    def filled(self, blocks: int) -> bool:
        slot = self._slot()
        return slot.filled and len(slot.kv) == blocks

    def put(self, block: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Keep block `block`'s prefix keys and values `[B, H, P, d]` (rotated)."""
        store = self.store_device or CPU
        entries = []
        for t in (k, v):
            values, scale = _quantize(t, self.dtype)
            entries.append((values.to(store), None if scale is None else scale.to(store)))
        self._slot().kv[block] = tuple(entries)

    def take(self, block: int, device: Any, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """Block `block`'s kept keys and values on `device` in `dtype`."""
        entry = self._slot().kv.get(block)
        if entry is None:
            raise PrefixCacheError(f"prefix cache: block {block} was not filled")
        return tuple(_dequantize(values, scale, self.dtype, device, dtype) for values, scale in entry)  # type: ignore

    def mark_filled(self) -> None:
        self._slot().filled = True
