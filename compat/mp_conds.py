"""ComfyUI's `comfy.conds` value wrappers (behaviour of comfy/conds.py), for packs that build or
read them: each holds one conditioning value and knows how to batch it with others.

`process_cond(batch_size, device=None, **kwargs)` -> a copy sized to the batch; `can_concat(other)`
-> whether two runs' values batch together; `concat(others)` -> the batched tensor;
`size()` -> the shape for memory estimates.
"""
from __future__ import annotations

import math
from typing import Any

import torch


def _repeat_to_batch(tensor: torch.Tensor, batch_size: int) -> torch.Tensor:
    if tensor.shape[0] > batch_size:
        return tensor[:batch_size]
    if tensor.shape[0] < batch_size:
        reps = math.ceil(batch_size / tensor.shape[0])
        return tensor.repeat([reps] + [1] * (tensor.ndim - 1))[:batch_size]
    return tensor


class CONDRegular:
    """A tensor repeated to the batch size; batches with a tensor of the same shape."""

    def __init__(self, cond: Any) -> None:
        self.cond = cond

    def _copy_with(self, cond: Any) -> "CONDRegular":
        return self.__class__(cond)

    def process_cond(self, batch_size: int, device: Any = None, **kwargs: Any) -> "CONDRegular":
        cond = _repeat_to_batch(self.cond, batch_size)
        return self._copy_with(cond if device is None else cond.to(device))

    def can_concat(self, other: "CONDRegular") -> bool:
        return self.cond.shape == other.cond.shape

    def concat(self, others: list["CONDRegular"]) -> torch.Tensor:
        return torch.cat([self.cond] + [o.cond for o in others])

    def size(self) -> list[int]:
        return list(self.cond.size())


class CONDNoiseShape(CONDRegular):
    """A spatial tensor cut to the run's area (`area` = (h, w, y, x), with more dims for video)."""

    def process_cond(self, batch_size: int, device: Any = None, area: Any = None, **kwargs: Any) -> "CONDNoiseShape":
        data = self.cond
        if area is not None:
            dims = len(area) // 2
            for i in range(dims):
                data = data.narrow(i + 2, area[i + dims], area[i])
        data = _repeat_to_batch(data, batch_size)
        return self._copy_with(data if device is None else data.to(device))


class CONDCrossAttn(CONDRegular):
    """Text conditioning: batches with a different token count when the counts share a small
    least common multiple (each is repeated along tokens up to it, as ComfyUI)."""

    def can_concat(self, other: "CONDCrossAttn") -> bool:
        a, b = self.cond.shape, other.cond.shape
        if a == b:
            return True
        if a[0] != b[0] or a[2] != b[2]:
            return False
        lcm = math.lcm(a[1], b[1])
        return lcm // min(a[1], b[1]) <= 4  # more would waste too much compute on repeated tokens

    def concat(self, others: list["CONDCrossAttn"]) -> torch.Tensor:
        conds = [self.cond] + [o.cond for o in others]
        length = math.lcm(*[c.shape[1] for c in conds])
        return torch.cat([c.repeat(1, length // c.shape[1], 1) if c.shape[1] < length else c for c in conds])


class CONDConstant(CONDRegular):
    """A non-tensor value the same for every run; batches only with an equal value."""

    def process_cond(self, batch_size: int, device: Any = None, **kwargs: Any) -> "CONDConstant":
        return self._copy_with(self.cond)

    def can_concat(self, other: "CONDConstant") -> bool:
        return self.cond == other.cond

    def concat(self, others: list["CONDConstant"]) -> Any:
        return self.cond

    def size(self) -> list[int]:
        return [1]


class CONDList(CONDRegular):
    """A list of tensors, each repeated to the batch; batches with a list of equal shapes."""

    def process_cond(self, batch_size: int, device: Any = None, **kwargs: Any) -> "CONDList":
        out = [_repeat_to_batch(c, batch_size) for c in self.cond]
        return self._copy_with([c if device is None else c.to(device) for c in out])

    def can_concat(self, other: "CONDList") -> bool:
        return len(self.cond) == len(other.cond) and all(a.shape == b.shape for a, b in zip(self.cond, other.cond))

    def concat(self, others: list["CONDList"]) -> list[torch.Tensor]:
        return [torch.cat([c] + [o.cond[i] for o in others]) for i, c in enumerate(self.cond)]

    def size(self) -> list[int]:
        return [len(self.cond)] + list(self.cond[0].size()) if self.cond else [0]


def lcm(a: int, b: int) -> int:
    return math.lcm(a, b)


CROSS_ATTENTION_KEYS = ("c_crossattn", "crossattn_controlnet")


def as_cond(key: str, value: Any) -> Any:
    """A model input named `key` as ComfyUI's models hold it in an entry's `model_conds`: the text
    contexts as `CONDCrossAttn`, `c_concat` as `CONDNoiseShape`, a tensor as `CONDRegular`, a list
    of tensors as `CONDList`, anything else as `CONDConstant`; a wrapper stays as it is. The
    runtime's batching reads every such wrapper as its `.cond` (comfy_core/sampling/cond_batch.py)."""
    if isinstance(value, CONDRegular):
        return value
    if key in CROSS_ATTENTION_KEYS:
        return CONDCrossAttn(value)
    if key == "c_concat":
        return CONDNoiseShape(value)
    if isinstance(value, torch.Tensor):
        return CONDRegular(value)
    if isinstance(value, list) and all(isinstance(v, torch.Tensor) for v in value):
        return CONDList(value)
    return CONDConstant(value)


def comfy_entries(entries: Any) -> Any:
    """Conditioning entries (a list of entry dicts, or None) as ComfyUI's sampling hands them to
    packs: each a shallow copy whose `model_conds` hold `comfy.conds` wrappers (`as_cond`)."""
    if entries is None:
        return None
    return [{**entry, "model_conds": {k: as_cond(k, v) for k, v in entry.get("model_conds", {}).items()}}
            for entry in entries]
